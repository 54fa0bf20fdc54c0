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

// handlers are the stub handlers shared with the other NRI version's peer.
type handlers = peer.Handlers[*api.PodSandbox, *api.Container, *api.LinuxResources, *api.ContainerAdjustment, *api.ContainerUpdate]

// adjustment builds a flavour's adjustment with this module's NRI types, or
// nil for the no-op flavour.
var adjustment = peer.Adjustment[api.ContainerAdjustment, api.Mount, api.LinuxDevice]

type plugin struct {
	*handlers
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
	p := &plugin{o: o, flavour: flavour}
	p.handlers = &handlers{Hooks: peer.NewHooks(out, o), Adjust: func() *api.ContainerAdjustment { return adjustment(p.flavour) }}
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
