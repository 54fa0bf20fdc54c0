// Command nri-go-plugin-legacy is nri-go-plugin built on the older reference
// Go stub (github.com/containerd/nri v0.8.0, pkg/stub): it receives pod
// events and container notifications through StateChange only, knows only
// the events in 0x7FF and cannot validate adjustments.
//
// It prints one JSON line per request received from the runtime to stdout
// (logs go to stderr) and behaves as told by flags: which events to
// subscribe to, which adjustments to make, which events to fail or delay.
// See interop/README.md for the schema.
package main

import (
	"context"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-rs/interop/peer"
)

const nriVersion = "v0.8.0"

type plugin struct {
	*peer.Hooks
	o       peer.PluginFlags
	stub    stub.Stub
	mask    api.EventMask
	flavour *peer.Flavour
}

func main() {
	o := peer.ParsePluginFlags(api.DefaultSocketPath,
		"plugin name (NRI_PLUGIN_NAME from a launching runtime takes precedence)",
		"events to subscribe, comma-separated, upstream syntax (e.g. runpodsandbox,createcontainer | pod | container | all); empty = every event NRI v0.8.0 knows (0x7FF)")
	out := peer.NewOut(os.Stdout)

	flavour, err := peer.ParseFlavour(o.Adjust)
	if err != nil {
		peer.Usage("%v", err)
	}
	p := &plugin{o: o, Hooks: peer.NewHooks(out, o), flavour: flavour}
	// Default: every event v0.8.0 knows (0x7FF).
	p.mask = api.ValidEvents
	if o.Events != "" {
		m, err := api.ParseEventMask(o.Events)
		if err != nil {
			peer.Usage("invalid --events (unsupported by NRI %s?): %v", nriVersion, err)
		}
		p.mask = m
	}

	// Identity: a launching runtime passes NRI_PLUGIN_NAME/NRI_PLUGIN_IDX.
	var opts []stub.Option
	if os.Getenv(api.PluginNameEnvVar) == "" { // v0.8.0 refuses to override
		opts = append(opts, stub.WithPluginName(o.Name))
	}
	if os.Getenv(api.PluginIdxEnvVar) == "" {
		opts = append(opts, stub.WithPluginIdx(o.Idx))
	}
	opts = append(opts, stub.WithSocketPath(o.Socket))
	onClose, closed := p.OnClose(o.Bench, o.ExitOnClose)
	opts = append(opts, stub.WithOnClose(onClose))

	var impl any
	switch {
	case o.Bench:
		impl = &benchPlugin{flavour: flavour}
	default:
		impl = p
	}
	s, err := stub.New(impl, opts...)
	if err != nil {
		out.Emit(map[string]any{"event": "error", "error": "stub.New: " + err.Error()})
		os.Exit(peer.ExitFailure)
	}
	p.stub = s
	p.Name = pluginName(o)
	if bp, ok := impl.(*benchPlugin); ok {
		bp.idx = identityIdx(o)
		bp.flavour.Idx = bp.idx
	}
	p.flavour.Idx = identityIdx(o)
	p.flavour.Name = p.Name

	if err := s.Start(context.Background()); err != nil {
		out.Emit(map[string]any{"event": "error", "plugin": p.Name, "error": err.Error()})
		os.Exit(peer.ExitFailure)
	}
	if !o.Bench {
		out.Emit(map[string]any{"event": "started", "plugin": p.Name, "plugin_nri_version": nriVersion})
	}
	peer.AwaitEnd(closed, s.Stop)
}

func identityIdx(o peer.PluginFlags) string {
	if v := os.Getenv(api.PluginIdxEnvVar); v != "" {
		return v
	}
	return o.Idx
}

func pluginName(o peer.PluginFlags) string {
	name := o.Name
	if v := os.Getenv(api.PluginNameEnvVar); v != "" {
		name = v
	}
	return identityIdx(o) + "-" + name
}

func (p *plugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	err := p.Hook("Configure", map[string]any{
		"config": config, "runtime_name": runtime, "runtime_version": version,
		"registration_timeout_ms": p.stub.RegistrationTimeout().Milliseconds(),
		"request_timeout_ms":      p.stub.RequestTimeout().Milliseconds(),
		"events":                  int32(p.mask),
	})
	if err != nil {
		return 0, err
	}
	return p.mask, nil
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	if err := p.Hook("Synchronize", peer.SyncLine(p.Hooks, pods, ctrs)); err != nil {
		return nil, err
	}
	if p.o.Unsolicited != "" {
		peer.SendUnsolicited(p.Hooks, ctrs, p.o.Unsolicited, p.stub.UpdateContainers)
	}
	return nil, nil
}

func (p *plugin) Shutdown(_ context.Context) {
	_ = p.Hook("Shutdown", map[string]any{})
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.Hook("RunPodSandbox", p.PodLine(pod))
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.Hook("StopPodSandbox", p.PodLine(pod))
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.Hook("RemovePodSandbox", p.PodLine(pod))
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := adjustment(p.flavour)
	l := p.CtrLine(pod, c)
	if p.Dump() {
		l["adjust"] = peer.PJ(adj)
	}
	if err := p.Hook("CreateContainer", l); err != nil {
		return nil, nil, err
	}
	return adj, nil, nil
}

func (p *plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.Hook("PostCreateContainer", p.CtrLine(pod, c))
}

func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.Hook("StartContainer", p.CtrLine(pod, c))
}

func (p *plugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.Hook("PostStartContainer", p.CtrLine(pod, c))
}

func (p *plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	l := p.CtrLine(pod, c)
	if p.Dump() {
		l["linux_resources"] = peer.PJ(res)
	}
	return nil, p.Hook("UpdateContainer", l)
}

func (p *plugin) PostUpdateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.Hook("PostUpdateContainer", p.CtrLine(pod, c))
}

func (p *plugin) StopContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, p.Hook("StopContainer", p.CtrLine(pod, c))
}

func (p *plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.Hook("RemoveContainer", p.CtrLine(pod, c))
}

// benchPlugin is the benchmark plugin: it implements only
// Synchronize, CreateContainer and StartContainer and prints nothing.
type benchPlugin struct {
	idx     string
	flavour *peer.Flavour
}

func (b *benchPlugin) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (b *benchPlugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return adjustment(b.flavour), nil, nil
}

func (b *benchPlugin) StartContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}
