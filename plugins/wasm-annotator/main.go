//go:build wasip1

// Command wasm-annotator is a sample NRI plugin compiled to WebAssembly
// with the standard Go toolchain against containerd/nri's pkg/api. The
// same .wasm file runs in nri-runtime (and so in `nri sim` and nri-proxy)
// and in containerd's own WebAssembly host.
//
// It subscribes to CreateContainer only and adds annotations to every new
// container: the ones its configuration lists, plus
// wasm-annotator.nri-rs.io/pod naming the container's pod. Its
// configuration (the drop-in file of the plugin, passed in Configure) is
// one annotation per line:
//
//	example.com/team=storage
//	# comment lines and empty lines are skipped
//	skip-namespace=kube-system
//
// "skip-namespace=NS" (any number of them) leaves containers of pods in
// namespace NS alone. With no configuration it adds
// wasm-annotator.nri-rs.io/annotated=true.
package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/nri/pkg/api"
)

const (
	podKey       = "wasm-annotator.nri-rs.io/pod"
	defaultKey   = "wasm-annotator.nri-rs.io/annotated"
	skipNSPrefix = "skip-namespace"
)

type annotation struct{ key, value string }

type plugin struct {
	annotations []annotation
	skip        map[string]bool
}

func init() {
	api.RegisterPlugin(&plugin{skip: map[string]bool{}})
}

func main() {}

// parse reads the configuration text: one key=value per line.
func (p *plugin) parse(config string) error {
	p.annotations, p.skip = nil, map[string]bool{}
	for n, line := range strings.Split(config, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return fmt.Errorf("wasm-annotator: line %d: want key=value, got %q", n+1, line)
		}
		if k == skipNSPrefix {
			p.skip[v] = true
			continue
		}
		p.annotations = append(p.annotations, annotation{k, v})
	}
	if len(p.annotations) == 0 {
		p.annotations = []annotation{{defaultKey, "true"}}
	}
	return nil
}

func (p *plugin) Configure(ctx context.Context, req *api.ConfigureRequest) (*api.ConfigureResponse, error) {
	if err := p.parse(req.GetConfig()); err != nil {
		return nil, err
	}
	api.NewHostFunctions().Log(ctx, &api.LogRequest{
		Msg: fmt.Sprintf("wasm-annotator: %d annotations, %d namespaces skipped, runtime %s %s",
			len(p.annotations), len(p.skip), req.GetRuntimeName(), req.GetRuntimeVersion()),
		Level: api.LogRequest_LEVEL_INFO,
	})
	mask := api.MustParseEventMask("CreateContainer")
	return &api.ConfigureResponse{Events: int32(mask)}, nil
}

func (p *plugin) CreateContainer(ctx context.Context, req *api.CreateContainerRequest) (*api.CreateContainerResponse, error) {
	pod := req.GetPod()
	if p.skip[pod.GetNamespace()] {
		return &api.CreateContainerResponse{}, nil
	}
	adjust := &api.ContainerAdjustment{}
	for _, a := range p.annotations {
		adjust.AddAnnotation(a.key, a.value)
	}
	adjust.AddAnnotation(podKey, pod.GetNamespace()+"/"+pod.GetName())
	return &api.CreateContainerResponse{Adjust: adjust}, nil
}

// The guest ABI exports every method; the ones this plugin does not
// subscribe to answer with an empty response.

func (p *plugin) Synchronize(context.Context, *api.SynchronizeRequest) (*api.SynchronizeResponse, error) {
	return &api.SynchronizeResponse{}, nil
}

func (p *plugin) Shutdown(context.Context, *api.Empty) (*api.Empty, error) {
	return &api.Empty{}, nil
}

func (p *plugin) RunPodSandbox(context.Context, *api.RunPodSandboxRequest) (*api.RunPodSandboxResponse, error) {
	return &api.RunPodSandboxResponse{}, nil
}

func (p *plugin) UpdatePodSandbox(context.Context, *api.UpdatePodSandboxRequest) (*api.UpdatePodSandboxResponse, error) {
	return &api.UpdatePodSandboxResponse{}, nil
}

func (p *plugin) PostUpdatePodSandbox(context.Context, *api.PostUpdatePodSandboxRequest) (*api.PostUpdatePodSandboxResponse, error) {
	return &api.PostUpdatePodSandboxResponse{}, nil
}

func (p *plugin) StopPodSandbox(context.Context, *api.StopPodSandboxRequest) (*api.StopPodSandboxResponse, error) {
	return &api.StopPodSandboxResponse{}, nil
}

func (p *plugin) RemovePodSandbox(context.Context, *api.RemovePodSandboxRequest) (*api.RemovePodSandboxResponse, error) {
	return &api.RemovePodSandboxResponse{}, nil
}

func (p *plugin) PostCreateContainer(context.Context, *api.PostCreateContainerRequest) (*api.PostCreateContainerResponse, error) {
	return &api.PostCreateContainerResponse{}, nil
}

func (p *plugin) StartContainer(context.Context, *api.StartContainerRequest) (*api.StartContainerResponse, error) {
	return &api.StartContainerResponse{}, nil
}

func (p *plugin) PostStartContainer(context.Context, *api.PostStartContainerRequest) (*api.PostStartContainerResponse, error) {
	return &api.PostStartContainerResponse{}, nil
}

func (p *plugin) UpdateContainer(context.Context, *api.UpdateContainerRequest) (*api.UpdateContainerResponse, error) {
	return &api.UpdateContainerResponse{}, nil
}

func (p *plugin) PostUpdateContainer(context.Context, *api.PostUpdateContainerRequest) (*api.PostUpdateContainerResponse, error) {
	return &api.PostUpdateContainerResponse{}, nil
}

func (p *plugin) StopContainer(context.Context, *api.StopContainerRequest) (*api.StopContainerResponse, error) {
	return &api.StopContainerResponse{}, nil
}

func (p *plugin) RemoveContainer(context.Context, *api.RemoveContainerRequest) (*api.RemoveContainerResponse, error) {
	return &api.RemoveContainerResponse{}, nil
}

func (p *plugin) StateChange(context.Context, *api.StateChangeEvent) (*api.Empty, error) {
	return &api.Empty{}, nil
}

func (p *plugin) ValidateContainerAdjustment(context.Context, *api.ValidateContainerAdjustmentRequest) (*api.ValidateContainerAdjustmentResponse, error) {
	return &api.ValidateContainerAdjustmentResponse{}, nil
}
