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
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-rs/interop/peer"
)

const nriVersion = "v0.12.5"

type options struct {
	socket      string
	name        string
	idx         string
	events      string
	adjust      peer.ListFlag
	unsolicited string
	failEvents  peer.ListFlag
	delayEvents peer.ListFlag
	exitOnClose bool
	dump        bool
	bench       bool
	policy      string
	logLevel    string
}

type plugin struct {
	o       options
	out     *peer.Out
	stub    stub.Stub
	mask    api.EventMask
	flavour *peer.Flavour
	fail    map[string]bool
	delay   map[string]time.Duration
	seq     atomic.Int64
	name    string
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.socket, "socket", api.DefaultSocketPath, "runtime socket to dial (ignored when NRI_PLUGIN_SOCKET is set by a launching runtime)")
	flag.StringVar(&o.name, "name", "go-plugin", "plugin name (NRI_PLUGIN_NAME from a launching runtime takes precedence unless given explicitly)")
	flag.StringVar(&o.idx, "idx", "50", "plugin index, two digits (NRI_PLUGIN_IDX from a launching runtime takes precedence)")
	flag.StringVar(&o.events, "events", "", "events to subscribe, comma-separated, upstream syntax (e.g. runpodsandbox,createcontainer | pod | container | all); empty = every event except validatecontaineradjustment")
	flag.Var(&o.adjust, "adjust", "CreateContainer adjustment flavour(s), comma-separated: none | adjusting (= env,annotation) | env | annotation | mount | device | rlimit | resources | remove-env=KEY")
	flag.StringVar(&o.unsolicited, "unsolicited-update", "", "after Synchronize, send UpdateContainers for the container with this name or ID")
	flag.Var(&o.failEvents, "fail-event", "return an error for this event (repeatable, comma-separated; e.g. CreateContainer, Configure, Synchronize)")
	flag.Var(&o.delayEvents, "delay-event", "sleep before answering: NAME=DURATION (repeatable, comma-separated)")
	flag.BoolVar(&o.exitOnClose, "exit-on-close", true, "exit when the runtime connection closes (false: stay alive until SIGINT/SIGTERM)")
	flag.BoolVar(&o.dump, "dump", false, "include full pod/container/resources protojson in event lines")
	flag.BoolVar(&o.bench, "bench", false, "benchmark mode: implement only Synchronize/CreateContainer/StartContainer, print nothing per event")
	flag.StringVar(&o.policy, "failure-policy", "", "declare a failure policy (stub.WithFailurePolicy): fail_request,keep_connected | fail_request | keep_connected | empty (declared, both fields false); unset: no policy declared")
	flag.StringVar(&o.logLevel, "log-level", "warn", "stderr log level: debug | info | warn | error")
	flag.Parse()
	if flag.NArg() != 0 {
		peer.Usage("unexpected arguments: %v", flag.Args())
	}
	if err := peer.SetupLogging(o.logLevel); err != nil {
		peer.Usage("%v", err)
	}
	return o
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
	o := parseFlags()
	out := peer.NewOut(os.Stdout)

	flavour, err := peer.ParseFlavour(o.adjust)
	if err != nil {
		peer.Usage("%v", err)
	}
	p := &plugin{o: o, out: out, flavour: flavour, fail: map[string]bool{}, delay: map[string]time.Duration{}}
	for _, e := range o.failEvents {
		c := peer.Canon(e)
		if c == "" {
			peer.Usage("unknown event %q in --fail-event", e)
		}
		p.fail[c] = true
	}
	for _, e := range o.delayEvents {
		k, v, ok := strings.Cut(e, "=")
		c := peer.Canon(k)
		d, err := time.ParseDuration(v)
		if !ok || c == "" || err != nil {
			peer.Usage("invalid --delay-event %q (want NAME=DURATION)", e)
		}
		p.delay[c] = d
	}
	// Default: every event except ValidateContainerAdjustment (0x1FFF).
	p.mask = api.ValidEvents
	p.mask.Clear(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	if o.events != "" {
		m, err := api.ParseEventMask(o.events)
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
		opts = append(opts, stub.WithPluginName(o.name))
	}
	if os.Getenv(api.PluginIdxEnvVar) == "" {
		opts = append(opts, stub.WithPluginIdx(o.idx))
	}
	opts = append(opts, stub.WithSocketPath(o.socket))
	if o.policy != "" {
		policy, err := parsePolicy(o.policy)
		if err != nil {
			peer.Usage("invalid --failure-policy: %v", err)
		}
		opts = append(opts, stub.WithFailurePolicy(policy))
	}
	closed := make(chan struct{})
	var closeOnce sync.Once
	opts = append(opts, stub.WithOnClose(func() {
		closeOnce.Do(func() {
			if !o.bench {
				out.Emit(map[string]any{"event": "closed", "plugin": p.name})
			}
			if o.exitOnClose {
				os.Exit(peer.ExitOK)
			}
			close(closed)
		})
	}))

	var impl any
	switch {
	case o.bench:
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
	p.name = pluginName(o)
	if bp, ok := impl.(*benchPlugin); ok {
		bp.idx = identityIdx(o)
		bp.flavour.Idx = bp.idx
	}
	p.flavour.Idx = identityIdx(o)
	p.flavour.Name = p.name

	if err := s.Start(context.Background()); err != nil {
		out.Emit(map[string]any{"event": "error", "plugin": p.name, "error": err.Error()})
		os.Exit(peer.ExitFailure)
	}
	if !o.bench {
		out.Emit(map[string]any{"event": "started", "plugin": p.name, "runtime_nri_version": s.RuntimeNRIVersion(), "plugin_nri_version": nriVersion})
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sigs:
		s.Stop()
	case <-closed:
		<-sigs
	}
	os.Exit(peer.ExitOK)
}

func identityIdx(o options) string {
	if v := os.Getenv(api.PluginIdxEnvVar); v != "" {
		return v
	}
	return o.idx
}

func pluginName(o options) string {
	name := o.name
	nameSet := false
	flag.Visit(func(f *flag.Flag) { nameSet = nameSet || f.Name == "name" })
	if v := os.Getenv(api.PluginNameEnvVar); v != "" && !nameSet {
		name = v
	}
	return identityIdx(o) + "-" + name
}

// hook prints the event line, then applies the configured delay and failure.
func (p *plugin) hook(ev string, line map[string]any) error {
	line["event"] = ev
	line["plugin"] = p.name
	line["seq"] = p.seq.Add(1)
	p.out.Emit(line)
	if d, ok := p.delay[ev]; ok {
		time.Sleep(d)
	}
	if p.fail[ev] {
		return fmt.Errorf("%s: injected failure for %s", p.name, ev)
	}
	return nil
}

func (p *plugin) podLine(pod *api.PodSandbox) map[string]any {
	l := map[string]any{
		"pod_id": pod.GetId(), "pod_name": pod.GetName(),
		"pod_uid": pod.GetUid(), "pod_namespace": pod.GetNamespace(),
	}
	if p.o.dump {
		l["pod"] = peer.PJ(pod)
	}
	return l
}

func (p *plugin) ctrLine(pod *api.PodSandbox, c *api.Container) map[string]any {
	l := p.podLine(pod)
	l["container_id"] = c.GetId()
	l["container_name"] = c.GetName()
	if p.o.dump {
		l["container"] = peer.PJ(c)
	}
	return l
}

func (p *plugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	err := p.hook("Configure", map[string]any{
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
	line := map[string]any{"pods": len(pods), "containers": len(ctrs)}
	if p.o.dump {
		pids, cids := []string{}, []string{}
		for _, x := range pods {
			pids = append(pids, x.Id)
		}
		for _, x := range ctrs {
			cids = append(cids, x.Id)
		}
		line["pod_ids"], line["container_ids"] = pids, cids
	}
	if err := p.hook("Synchronize", line); err != nil {
		return nil, err
	}
	if p.o.unsolicited != "" {
		var target *api.Container
		for _, c := range ctrs {
			if c.Name == p.o.unsolicited || c.Id == p.o.unsolicited {
				target = c
				break
			}
		}
		go p.sendUnsolicited(target)
	}
	return nil, nil
}

// sendUnsolicited asks the runtime to update target's CPU shares and memory
// limit (fixed values, see README).
func (p *plugin) sendUnsolicited(target *api.Container) {
	line := map[string]any{"event": "update_containers", "plugin": p.name, "seq": p.seq.Add(1)}
	if target == nil {
		line["error"] = fmt.Sprintf("container %q not found in Synchronize", p.o.unsolicited)
		p.out.Emit(line)
		return
	}
	u := peer.UnsolicitedUpdate[api.ContainerUpdate](target.Id)
	failed, err := p.stub.UpdateContainers([]*api.ContainerUpdate{u})
	line["request"] = peer.PJList([]*api.ContainerUpdate{u})
	line["failed"] = peer.PJList(failed)
	if err != nil {
		line["error"] = err.Error()
	}
	p.out.Emit(line)
}

func (p *plugin) Shutdown(_ context.Context) {
	_ = p.hook("Shutdown", map[string]any{})
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.hook("RunPodSandbox", p.podLine(pod))
}

func (p *plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, overhead, res *api.LinuxResources) error {
	l := p.podLine(pod)
	if p.o.dump {
		l["overhead_linux_resources"] = peer.PJ(overhead)
		l["linux_resources"] = peer.PJ(res)
	}
	return p.hook("UpdatePodSandbox", l)
}

func (p *plugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.hook("PostUpdatePodSandbox", p.podLine(pod))
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.hook("StopPodSandbox", p.podLine(pod))
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.hook("RemovePodSandbox", p.podLine(pod))
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := adjustment(p.flavour)
	l := p.ctrLine(pod, c)
	if p.o.dump {
		l["adjust"] = peer.PJ(adj)
	}
	if err := p.hook("CreateContainer", l); err != nil {
		return nil, nil, err
	}
	return adj, nil, nil
}

func (p *plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.hook("PostCreateContainer", p.ctrLine(pod, c))
}

func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.hook("StartContainer", p.ctrLine(pod, c))
}

func (p *plugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.hook("PostStartContainer", p.ctrLine(pod, c))
}

func (p *plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	l := p.ctrLine(pod, c)
	if p.o.dump {
		l["linux_resources"] = peer.PJ(res)
	}
	return nil, p.hook("UpdateContainer", l)
}

func (p *plugin) PostUpdateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.hook("PostUpdateContainer", p.ctrLine(pod, c))
}

func (p *plugin) StopContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, p.hook("StopContainer", p.ctrLine(pod, c))
}

func (p *plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	return p.hook("RemoveContainer", p.ctrLine(pod, c))
}

// validatorPlugin additionally implements ValidateContainerAdjustment; it is
// used only when --events subscribes to validatecontaineradjustment.
type validatorPlugin struct{ *plugin }

func (v *validatorPlugin) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	l := v.ctrLine(req.GetPod(), req.GetContainer())
	var names []string
	for _, pi := range req.GetPlugins() {
		names = append(names, pi.GetIndex()+"-"+pi.GetName())
	}
	l["plugins"] = names
	if v.o.dump {
		l["adjust"] = peer.PJ(req.GetAdjust())
	}
	return v.hook("ValidateContainerAdjustment", l)
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
