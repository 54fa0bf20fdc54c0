// Command nri-go-plugin is a scriptable NRI plugin built on the reference Go
// stub (github.com/containerd/nri v0.12.5, pkg/stub).
//
// It prints one JSON line per request received from the runtime to stdout
// (logs go to stderr) and behaves as told by flags: which events to
// subscribe to, which adjustments to make, which events to fail or delay.
// See interop/README.md for the schema.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-rs/interop/peer"
)

const nriVersion = "v0.12.5"

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

// parsePolicy parses the --failure-policy value: field names separated by
// commas, or "empty" for a declared policy with no field set.
func parsePolicy(v string) (*api.FailurePolicy, error) {
	policy := &api.FailurePolicy{}
	if v == "empty" {
		return policy, nil
	}
	for _, f := range strings.Split(v, ",") {
		switch strings.TrimSpace(f) {
		case "fail_request":
			policy.FailRequest = true
		case "keep_connected":
			policy.KeepConnected = true
		default:
			return nil, fmt.Errorf("unknown field %q (want fail_request, keep_connected or empty)", f)
		}
	}
	return policy, nil
}

func main() {
	policyFlag := flag.String("failure-policy", "", "declare a failure policy (stub.WithFailurePolicy): fail_request,keep_connected | fail_request | keep_connected | empty (declared, both fields false); unset: no policy declared")
	o := peer.ParsePluginFlags(api.DefaultSocketPath,
		"plugin name (NRI_PLUGIN_NAME from a launching runtime takes precedence unless given explicitly)",
		"events to subscribe, comma-separated, upstream syntax (e.g. runpodsandbox,createcontainer | pod | container | all); empty = every event except validatecontaineradjustment")
	out := peer.NewOut(os.Stdout)

	flavour, err := peer.ParseFlavour(o.Adjust)
	if err != nil {
		peer.Usage("%v", err)
	}
	p := &plugin{o: o, flavour: flavour}
	p.handlers = &handlers{Hooks: peer.NewHooks(out, o), Adjust: func() *api.ContainerAdjustment { return adjustment(p.flavour) }}
	// Default: every event except ValidateContainerAdjustment (0x1FFF).
	p.mask = api.ValidEvents
	p.mask.Clear(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	if o.Events != "" {
		m, err := api.ParseEventMask(o.Events)
		if err != nil {
			peer.Usage("invalid --events: %v", err)
		}
		p.mask = m
	}

	// Identity: a launching runtime passes NRI_PLUGIN_NAME/NRI_PLUGIN_IDX.
	var opts []stub.Option
	nameSet := false
	flag.Visit(func(f *flag.Flag) { nameSet = nameSet || f.Name == "name" })
	if nameSet || os.Getenv(api.PluginNameEnvVar) == "" {
		opts = append(opts, stub.WithPluginName(o.Name))
	}
	if os.Getenv(api.PluginIdxEnvVar) == "" {
		opts = append(opts, stub.WithPluginIdx(o.Idx))
	}
	opts = append(opts, stub.WithSocketPath(o.Socket))
	if *policyFlag != "" {
		policy, err := parsePolicy(*policyFlag)
		if err != nil {
			peer.Usage("invalid --failure-policy: %v", err)
		}
		opts = append(opts, stub.WithFailurePolicy(policy))
	}
	onClose, closed := p.OnClose(o.Bench, o.ExitOnClose)
	opts = append(opts, stub.WithOnClose(onClose))

	var impl any
	switch {
	case o.Bench:
		impl = &benchPlugin{flavour: flavour}
	case p.mask.IsSet(api.Event_VALIDATE_CONTAINER_ADJUSTMENT):
		impl = &validatorPlugin{p}
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
		out.Emit(map[string]any{"event": "started", "plugin": p.Name, "runtime_nri_version": s.RuntimeNRIVersion(), "plugin_nri_version": nriVersion})
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
	nameSet := false
	flag.Visit(func(f *flag.Flag) { nameSet = nameSet || f.Name == "name" })
	if v := os.Getenv(api.PluginNameEnvVar); v != "" && !nameSet {
		name = v
	}
	return identityIdx(o) + "-" + name
}

func (p *plugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	err := p.Hook("Configure", map[string]any{
		"config": config, "runtime_name": runtime, "runtime_version": version,
		"runtime_nri_version":     p.stub.RuntimeNRIVersion(),
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

func (p *plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, overhead, res *api.LinuxResources) error {
	l := p.PodLine(pod)
	if p.Dump() {
		l["overhead_linux_resources"] = peer.PJ(overhead)
		l["linux_resources"] = peer.PJ(res)
	}
	return p.Hook("UpdatePodSandbox", l)
}

func (p *plugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.Hook("PostUpdatePodSandbox", p.PodLine(pod))
}

// validatorPlugin additionally implements ValidateContainerAdjustment; it is
// used only when --events subscribes to validatecontaineradjustment.
type validatorPlugin struct{ *plugin }

func (v *validatorPlugin) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	l := v.CtrLine(req.GetPod(), req.GetContainer())
	var names []string
	for _, pi := range req.GetPlugins() {
		names = append(names, pi.GetIndex()+"-"+pi.GetName())
	}
	l["plugins"] = names
	if v.Dump() {
		l["adjust"] = peer.PJ(req.GetAdjust())
	}
	return v.Hook("ValidateContainerAdjustment", l)
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
