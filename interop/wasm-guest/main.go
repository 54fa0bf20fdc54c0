//go:build wasip1

// Command wasm-guest is an NRI plugin compiled to WebAssembly with the
// standard Go toolchain against containerd/nri's pkg/api (v0.12.5):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o wasm-guest.wasm .
//
// It is the guest the interop tests load both into the reference Go host
// (pkg/adaptation, through nri-go-runtime) and into nri-runtime, to compare
// what each makes of it. Behaviour:
//
//   - subscribes to RunPodSandbox, CreateContainer, StartContainer,
//     StopContainer and RemovePodSandbox only;
//   - CreateContainer: sets env WASM_GUEST=yes, a read-only bind mount at
//     /run/wasm-guest, and the annotation wasm-guest.nri-rs.io/seen listing
//     every request it received so far (so which events reached the guest is
//     visible in the adjustment);
//   - fails CreateContainer of the container named by "fail=NAME" in its
//     configuration text (one key=value per line);
//   - with "bench=noop" in its configuration (the benchmark's WASM cells)
//     answers CreateContainer with no adjustment and records nothing.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/nri/pkg/api"
)

type plugin struct {
	failName string
	noop     bool
	seen     []string
}

func init() {
	api.RegisterPlugin(&plugin{})
}

func main() {}

func (p *plugin) note(what string) {
	p.seen = append(p.seen, what)
}

func (p *plugin) Configure(ctx context.Context, req *api.ConfigureRequest) (*api.ConfigureResponse, error) {
	for _, line := range strings.Split(req.GetConfig(), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		switch k, v = strings.TrimSpace(k), strings.TrimSpace(v); {
		case ok && k == "fail":
			p.failName = v
		case ok && k == "bench":
			p.noop = v == "noop"
		}
	}
	p.note("Configure:" + req.GetRuntimeName())
	api.NewHostFunctions().Log(ctx, &api.LogRequest{
		Msg:   "wasm-guest configured by " + req.GetRuntimeName(),
		Level: api.LogRequest_LEVEL_INFO,
	})
	fmt.Fprintf(os.Stderr, "wasm-guest: fail=%q\n", p.failName)
	mask := api.MustParseEventMask("RunPodSandbox", "CreateContainer", "StartContainer",
		"StopContainer", "RemovePodSandbox")
	return &api.ConfigureResponse{Events: int32(mask)}, nil
}

func (p *plugin) Synchronize(ctx context.Context, req *api.SynchronizeRequest) (*api.SynchronizeResponse, error) {
	p.note(fmt.Sprintf("Synchronize:%d/%d", len(req.GetPods()), len(req.GetContainers())))
	return &api.SynchronizeResponse{}, nil
}

func (p *plugin) Shutdown(ctx context.Context, req *api.Empty) (*api.Empty, error) {
	return &api.Empty{}, nil
}

func (p *plugin) RunPodSandbox(ctx context.Context, req *api.RunPodSandboxRequest) (*api.RunPodSandboxResponse, error) {
	p.note("RunPodSandbox:" + req.GetPod().GetName())
	return &api.RunPodSandboxResponse{}, nil
}

func (p *plugin) UpdatePodSandbox(ctx context.Context, req *api.UpdatePodSandboxRequest) (*api.UpdatePodSandboxResponse, error) {
	p.note("UpdatePodSandbox:" + req.GetPod().GetName())
	return &api.UpdatePodSandboxResponse{}, nil
}

func (p *plugin) PostUpdatePodSandbox(ctx context.Context, req *api.PostUpdatePodSandboxRequest) (*api.PostUpdatePodSandboxResponse, error) {
	p.note("PostUpdatePodSandbox:" + req.GetPod().GetName())
	return &api.PostUpdatePodSandboxResponse{}, nil
}

func (p *plugin) StopPodSandbox(ctx context.Context, req *api.StopPodSandboxRequest) (*api.StopPodSandboxResponse, error) {
	p.note("StopPodSandbox:" + req.GetPod().GetName())
	return &api.StopPodSandboxResponse{}, nil
}

func (p *plugin) RemovePodSandbox(ctx context.Context, req *api.RemovePodSandboxRequest) (*api.RemovePodSandboxResponse, error) {
	p.note("RemovePodSandbox:" + req.GetPod().GetName())
	return &api.RemovePodSandboxResponse{}, nil
}

func (p *plugin) CreateContainer(ctx context.Context, req *api.CreateContainerRequest) (*api.CreateContainerResponse, error) {
	if p.noop {
		return &api.CreateContainerResponse{}, nil
	}
	name := req.GetContainer().GetName()
	p.note("CreateContainer:" + name)
	if p.failName != "" && name == p.failName {
		return nil, fmt.Errorf("wasm-guest refuses container %s", name)
	}
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv("WASM_GUEST", "yes")
	adjust.AddAnnotation("wasm-guest.nri-rs.io/seen", strings.Join(p.seen, ","))
	adjust.AddMount(&api.Mount{
		Destination: "/run/wasm-guest",
		Source:      "/var/lib/wasm-guest",
		Type:        "bind",
		Options:     []string{"rbind", "ro"},
	})
	return &api.CreateContainerResponse{Adjust: adjust}, nil
}

func (p *plugin) PostCreateContainer(ctx context.Context, req *api.PostCreateContainerRequest) (*api.PostCreateContainerResponse, error) {
	p.note("PostCreateContainer:" + req.GetContainer().GetName())
	return &api.PostCreateContainerResponse{}, nil
}

func (p *plugin) StartContainer(ctx context.Context, req *api.StartContainerRequest) (*api.StartContainerResponse, error) {
	p.note("StartContainer:" + req.GetContainer().GetName())
	return &api.StartContainerResponse{}, nil
}

func (p *plugin) PostStartContainer(ctx context.Context, req *api.PostStartContainerRequest) (*api.PostStartContainerResponse, error) {
	p.note("PostStartContainer:" + req.GetContainer().GetName())
	return &api.PostStartContainerResponse{}, nil
}

func (p *plugin) UpdateContainer(ctx context.Context, req *api.UpdateContainerRequest) (*api.UpdateContainerResponse, error) {
	p.note("UpdateContainer:" + req.GetContainer().GetName())
	return &api.UpdateContainerResponse{}, nil
}

func (p *plugin) PostUpdateContainer(ctx context.Context, req *api.PostUpdateContainerRequest) (*api.PostUpdateContainerResponse, error) {
	p.note("PostUpdateContainer:" + req.GetContainer().GetName())
	return &api.PostUpdateContainerResponse{}, nil
}

func (p *plugin) StopContainer(ctx context.Context, req *api.StopContainerRequest) (*api.StopContainerResponse, error) {
	p.note("StopContainer:" + req.GetContainer().GetName())
	return &api.StopContainerResponse{}, nil
}

func (p *plugin) RemoveContainer(ctx context.Context, req *api.RemoveContainerRequest) (*api.RemoveContainerResponse, error) {
	p.note("RemoveContainer:" + req.GetContainer().GetName())
	return &api.RemoveContainerResponse{}, nil
}

func (p *plugin) StateChange(ctx context.Context, req *api.StateChangeEvent) (*api.Empty, error) {
	p.note("StateChange:" + req.GetEvent().String())
	return &api.Empty{}, nil
}

func (p *plugin) ValidateContainerAdjustment(ctx context.Context, req *api.ValidateContainerAdjustmentRequest) (*api.ValidateContainerAdjustmentResponse, error) {
	return &api.ValidateContainerAdjustmentResponse{}, nil
}
