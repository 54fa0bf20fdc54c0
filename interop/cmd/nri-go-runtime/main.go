// Command nri-go-runtime is a scriptable NRI runtime built on the reference
// Go adaptation (github.com/containerd/nri v0.12.5, pkg/adaptation).
//
// It reads JSON commands from stdin, one per line, and writes one JSON result
// line per command to stdout. Asynchronous happenings (plugin synchronization,
// unsolicited UpdateContainers from plugins, plugin count changes, deprecation
// warnings) are written as lines carrying an "async" key. Logs go to stderr.
// See interop/README.md for the schema.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	validator "github.com/containerd/nri/plugins/default-validator"

	"github.com/nri-rs/interop/peer"
)

const nriVersion = "v0.12.5"

type options struct {
	socket       string
	pluginDir    string
	configDir    string
	regTimeout   time.Duration
	reqTimeout   time.Duration
	name         string
	version      string
	updatePolicy string
	logLevel     string
	noListen     bool
	// validator is the built-in default validator's configuration
	// (--default-validator), nil when not asked for.
	validator *validator.DefaultValidatorConfig
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.socket, "socket", "", "socket path for external plugins (required unless --no-listen)")
	flag.StringVar(&o.pluginDir, "plugin-dir", "/nonexistent/nri-go-runtime/plugins", "directory of pre-installed plugins to launch (may not exist)")
	flag.StringVar(&o.configDir, "config-dir", "/nonexistent/nri-go-runtime/conf.d", "drop-in config directory for launched plugins (may not exist)")
	flag.DurationVar(&o.regTimeout, "registration-timeout", adaptation.DefaultPluginRegistrationTimeout, "plugin registration timeout")
	flag.DurationVar(&o.reqTimeout, "request-timeout", adaptation.DefaultPluginRequestTimeout, "plugin request timeout")
	flag.StringVar(&o.name, "name", "nri-go-runtime", "runtime name sent in Configure")
	flag.StringVar(&o.version, "version", nriVersion, "runtime version sent in Configure")
	flag.StringVar(&o.updatePolicy, "update-policy", "succeed", "answer to unsolicited UpdateContainers: succeed | fail | error")
	flag.StringVar(&o.logLevel, "log-level", "warn", "stderr log level: debug | info | warn | error")
	flag.BoolVar(&o.noListen, "no-listen", false, "do not accept external plugin connections")
	defaultValidator := flag.String("default-validator", "", "register the adaptation's built-in default validator with this configuration: JSON with the Go field names of DefaultValidatorConfig (e.g. {\"Enable\":true,\"RejectOCIHookAdjustment\":true})")
	flag.Parse()
	if *defaultValidator != "" {
		o.validator = &validator.DefaultValidatorConfig{}
		if err := json.Unmarshal([]byte(*defaultValidator), o.validator); err != nil {
			peer.Usage("invalid --default-validator: %v", err)
		}
	}
	if flag.NArg() != 0 {
		peer.Usage("unexpected arguments: %v", flag.Args())
	}
	if o.socket == "" && !o.noListen {
		peer.Usage("--socket is required (or --no-listen)")
	}
	if !validPolicy(o.updatePolicy) {
		peer.Usage("invalid --update-policy %q", o.updatePolicy)
	}
	if err := peer.SetupLogging(o.logLevel); err != nil {
		peer.Usage("%v", err)
	}
	return o
}

func validPolicy(p string) bool { return p == "succeed" || p == "fail" || p == "error" }

// runtime is the fake container runtime around the adaptation.
type runtime struct {
	a   *adaptation.Adaptation
	out *peer.Out

	mu       sync.Mutex
	pods     map[string]*api.PodSandbox
	podOrder []string
	ctrs     map[string]*api.Container
	ctrOrder []string
	explicit bool
	syncPods []*api.PodSandbox
	syncCtrs []*api.Container
	policy   string

	cntMu   sync.Mutex
	count   int
	cntChng chan struct{} // closed and replaced on every count change
}

// metrics implements adaptation.Metrics; only the plugin count is used.
type metrics struct{ rt *runtime }

func (m *metrics) RecordPluginInvocation(string, string, error)      {}
func (m *metrics) RecordPluginLatency(string, string, time.Duration) {}
func (m *metrics) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {
}
func (m *metrics) UpdatePluginCount(n int) { m.rt.setCount(n) }

// deprecations reports StateChange fallbacks.
type deprecations struct{ rt *runtime }

func (d *deprecations) PluginWarning(_ context.Context, dep adaptation.Deprecation, plugin, details string) {
	d.rt.out.Emit(map[string]any{"async": "deprecation", "deprecation": dep.String(), "plugin": plugin, "details": details})
}

func (rt *runtime) setCount(n int) {
	rt.cntMu.Lock()
	changed := n != rt.count
	rt.count = n
	if changed {
		close(rt.cntChng)
		rt.cntChng = make(chan struct{})
	}
	rt.cntMu.Unlock()
	if changed {
		rt.out.Emit(map[string]any{"async": "plugin_count", "count": n})
	}
}

func (rt *runtime) getCount() (int, chan struct{}) {
	rt.cntMu.Lock()
	defer rt.cntMu.Unlock()
	return rt.count, rt.cntChng
}

// snapshot returns the state handed to a synchronizing plugin.
func (rt *runtime) snapshot() ([]*api.PodSandbox, []*api.Container, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.explicit {
		return rt.syncPods, rt.syncCtrs, true
	}
	pods := make([]*api.PodSandbox, 0, len(rt.podOrder))
	for _, id := range rt.podOrder {
		pods = append(pods, rt.pods[id])
	}
	ctrs := make([]*api.Container, 0, len(rt.ctrOrder))
	for _, id := range rt.ctrOrder {
		ctrs = append(ctrs, rt.ctrs[id])
	}
	return pods, ctrs, false
}

func (rt *runtime) syncFn(ctx context.Context, cb adaptation.SyncCB) error {
	pods, ctrs, explicit := rt.snapshot()
	start := time.Now()
	updates, err := cb(ctx, pods, ctrs)
	el := time.Since(start)
	line := map[string]any{
		"async": "synchronize", "pods": len(pods), "containers": len(ctrs),
		"explicit_state": explicit, "elapsed_us": el.Microseconds(),
		"updates": peer.PJList(updates),
	}
	if err != nil {
		line["error"] = err.Error()
	}
	rt.out.Emit(line)
	return err
}

func (rt *runtime) updateFn(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	rt.mu.Lock()
	policy := rt.policy
	rt.mu.Unlock()
	var (
		failed []*api.ContainerUpdate
		err    error
	)
	switch policy {
	case "fail":
		failed = updates
	case "error":
		err = fmt.Errorf("unsolicited container update rejected by policy")
	}
	line := map[string]any{
		"async": "update_containers", "policy": policy,
		"updates": peer.PJList(updates), "failed": peer.PJList(failed),
	}
	if err != nil {
		line["error"] = err.Error()
	}
	rt.out.Emit(line)
	return failed, err
}

// --- state tracking -------------------------------------------------------

func (rt *runtime) putPod(p *api.PodSandbox) {
	if p == nil || p.Id == "" {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.pods[p.Id]; !ok {
		rt.podOrder = append(rt.podOrder, p.Id)
	}
	rt.pods[p.Id] = proto.Clone(p).(*api.PodSandbox)
}

func (rt *runtime) delPod(id string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.pods[id]; !ok {
		return
	}
	delete(rt.pods, id)
	rt.podOrder = remove(rt.podOrder, id)
}

func (rt *runtime) putCtr(c *api.Container, state api.ContainerState) {
	if c == nil || c.Id == "" {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.ctrs[c.Id]; !ok {
		rt.ctrOrder = append(rt.ctrOrder, c.Id)
	}
	cc := proto.Clone(c).(*api.Container)
	if state != api.ContainerState_CONTAINER_UNKNOWN {
		cc.State = state
	}
	rt.ctrs[c.Id] = cc
}

func (rt *runtime) setCtrState(c *api.Container, state api.ContainerState) {
	if c == nil {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if cur, ok := rt.ctrs[c.Id]; ok {
		cur.State = state
	}
}

func (rt *runtime) delCtr(id string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.ctrs[id]; !ok {
		return
	}
	delete(rt.ctrs, id)
	rt.ctrOrder = remove(rt.ctrOrder, id)
}

func remove(s []string, id string) []string {
	out := s[:0]
	for _, x := range s {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// --- commands ----------------------------------------------------------------

type cmdError struct {
	msg         string
	unsupported bool
}

func (e *cmdError) Error() string { return e.msg }

func errf(format string, args ...any) error { return &cmdError{msg: fmt.Sprintf(format, args...)} }

// fill sets the request's "pod"/"container" fields from tracked state when the
// command gave pod_id/container_id instead of inline objects (or gave a
// container whose pod_sandbox_id is known).
func (rt *runtime) fill(req proto.Message, podID, ctrID string) error {
	m := req.ProtoReflect()
	fields := m.Descriptor().Fields()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if fd := fields.ByName("container"); fd != nil && !m.Has(fd) && ctrID != "" {
		c, ok := rt.ctrs[ctrID]
		if !ok {
			return errf("unknown container_id %q", ctrID)
		}
		m.Set(fd, protoreflect.ValueOfMessage(proto.Clone(c).ProtoReflect()))
	}
	if fd := fields.ByName("pod"); fd != nil && !m.Has(fd) {
		if podID == "" {
			if cfd := fields.ByName("container"); cfd != nil && m.Has(cfd) {
				if c, ok := m.Get(cfd).Message().Interface().(*api.Container); ok {
					podID = c.PodSandboxId
				}
			}
		}
		if podID != "" {
			p, ok := rt.pods[podID]
			if !ok {
				return errf("unknown pod_id %q", podID)
			}
			m.Set(fd, protoreflect.ValueOfMessage(proto.Clone(p).ProtoReflect()))
		}
	}
	return nil
}

// eventSpec describes one lifecycle event command.
type eventSpec struct {
	newReq func() proto.Message
	call   func(ctx context.Context, rt *runtime, req proto.Message) (proto.Message, error)
}

var events = map[string]eventSpec{
	"RunPodSandbox": {
		func() proto.Message { return &api.RunPodSandboxRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			req := m.(*api.RunPodSandboxRequest)
			err := rt.a.RunPodSandbox(ctx, req)
			if err == nil {
				rt.putPod(req.Pod)
			}
			return nil, err
		},
	},
	"UpdatePodSandbox": {
		func() proto.Message { return &api.UpdatePodSandboxRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			req := m.(*api.UpdatePodSandboxRequest)
			rsp, err := rt.a.UpdatePodSandbox(ctx, req)
			if err != nil {
				return nil, err
			}
			return rsp, nil
		},
	},
	"PostUpdatePodSandbox": {
		func() proto.Message { return &api.PostUpdatePodSandboxRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			req := m.(*api.PostUpdatePodSandboxRequest)
			err := rt.a.PostUpdatePodSandbox(ctx, req)
			if err == nil {
				rt.putPod(req.Pod)
			}
			return nil, err
		},
	},
	"StopPodSandbox": {
		func() proto.Message { return &api.StopPodSandboxRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			return nil, rt.a.StopPodSandbox(ctx, m.(*api.StopPodSandboxRequest))
		},
	},
	"RemovePodSandbox": {
		func() proto.Message { return &api.RemovePodSandboxRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			req := m.(*api.RemovePodSandboxRequest)
			err := rt.a.RemovePodSandbox(ctx, req)
			rt.delPod(req.GetPod().GetId())
			return nil, err
		},
	},
	"CreateContainer": {
		func() proto.Message { return &api.CreateContainerRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			req := m.(*api.CreateContainerRequest)
			rsp, err := rt.a.CreateContainer(ctx, req)
			if err != nil {
				return nil, err
			}
			rt.putCtr(req.Container, api.ContainerState_CONTAINER_CREATED)
			return rsp, nil
		},
	},
	"PostCreateContainer": {
		func() proto.Message { return &api.PostCreateContainerRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			return nil, rt.a.PostCreateContainer(ctx, m.(*api.PostCreateContainerRequest))
		},
	},
	"StartContainer": {
		func() proto.Message { return &api.StartContainerRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			req := m.(*api.StartContainerRequest)
			err := rt.a.StartContainer(ctx, req)
			if err == nil {
				rt.setCtrState(req.Container, api.ContainerState_CONTAINER_RUNNING)
			}
			return nil, err
		},
	},
	"PostStartContainer": {
		func() proto.Message { return &api.PostStartContainerRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			return nil, rt.a.PostStartContainer(ctx, m.(*api.PostStartContainerRequest))
		},
	},
	"UpdateContainer": {
		func() proto.Message { return &api.UpdateContainerRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			rsp, err := rt.a.UpdateContainer(ctx, m.(*api.UpdateContainerRequest))
			if err != nil {
				return nil, err
			}
			return rsp, nil
		},
	},
	"PostUpdateContainer": {
		func() proto.Message { return &api.PostUpdateContainerRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			return nil, rt.a.PostUpdateContainer(ctx, m.(*api.PostUpdateContainerRequest))
		},
	},
	"StopContainer": {
		func() proto.Message { return &api.StopContainerRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			req := m.(*api.StopContainerRequest)
			rsp, err := rt.a.StopContainer(ctx, req)
			rt.setCtrState(req.Container, api.ContainerState_CONTAINER_STOPPED)
			if err != nil {
				return nil, err
			}
			return rsp, nil
		},
	},
	"RemoveContainer": {
		func() proto.Message { return &api.RemoveContainerRequest{} },
		func(ctx context.Context, rt *runtime, m proto.Message) (proto.Message, error) {
			req := m.(*api.RemoveContainerRequest)
			err := rt.a.RemoveContainer(ctx, req)
			rt.delCtr(req.GetContainer().GetId())
			return nil, err
		},
	},
}

// controlCommands lists the non-event commands by normalized name.
var controlCommands = map[string]string{
	"waitplugins":     "wait_plugins",
	"listplugins":     "list_plugins",
	"setsyncstate":    "set_sync_state",
	"clearsyncstate":  "clear_sync_state",
	"state":           "state",
	"setupdatepolicy": "set_update_policy",
	"stop":            "stop",
}

// handle executes one command line and returns its result object.
func (rt *runtime) handle(line []byte) (res map[string]any, stop bool) {
	res = map[string]any{}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		res["ok"] = false
		res["error"] = "invalid JSON command: " + err.Error()
		return res, false
	}
	if id, ok := raw["id"]; ok {
		res["id"] = id
	}
	var name string
	if err := json.Unmarshal(raw["cmd"], &name); err != nil || name == "" {
		res["ok"] = false
		res["error"] = `missing or invalid "cmd"`
		return res, false
	}
	delete(raw, "id")
	delete(raw, "cmd")

	var (
		out map[string]any
		err error
	)
	if c, ok := controlCommands[peer.Norm(name)]; ok {
		res["cmd"] = c
		out, stop, err = rt.control(c, raw)
	} else if ev := peer.Canon(name); ev != "" {
		res["cmd"] = ev
		out, err = rt.event(ev, raw)
	} else {
		res["cmd"] = name
		err = errf("unknown command %q", name)
	}
	for k, v := range out {
		res[k] = v
	}
	res["ok"] = err == nil
	if err != nil {
		res["error"] = err.Error()
		if ce, ok := err.(*cmdError); ok && ce.unsupported {
			res["unsupported"] = true
		}
	}
	return res, stop
}

func str(raw map[string]json.RawMessage, key string) (string, error) {
	v, ok := raw[key]
	if !ok {
		return "", nil
	}
	delete(raw, key)
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", errf("%q must be a string", key)
	}
	return s, nil
}

func num(raw map[string]json.RawMessage, key string, def int64) (int64, error) {
	v, ok := raw[key]
	if !ok {
		return def, nil
	}
	delete(raw, key)
	var n int64
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, errf("%q must be an integer", key)
	}
	return n, nil
}

func noExtra(raw map[string]json.RawMessage) error {
	for k := range raw {
		return errf("unknown field %q", k)
	}
	return nil
}

func (rt *runtime) event(ev string, raw map[string]json.RawMessage) (map[string]any, error) {
	spec, ok := events[ev]
	if !ok {
		return nil, &cmdError{msg: ev + " cannot be sent by a runtime", unsupported: true}
	}
	podID, err := str(raw, "pod_id")
	if err != nil {
		return nil, err
	}
	ctrID, err := str(raw, "container_id")
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(raw)
	req := spec.newReq()
	if err := peer.UnmarshalPJ(body, req); err != nil {
		return nil, errf("invalid %s request: %v", ev, err)
	}
	if err := rt.fill(req, podID, ctrID); err != nil {
		return nil, err
	}

	// Like containerd: no plugin may finish synchronizing while an event
	// is in flight, so a new plugin sees either the before or after state.
	block := rt.a.BlockPluginSync()
	start := time.Now()
	rsp, err := spec.call(context.Background(), rt, req)
	el := time.Since(start)
	block.Unblock()

	out := map[string]any{"elapsed_us": el.Microseconds()}
	if err != nil {
		return out, err
	}
	if rsp != nil {
		out["response"] = peer.PJ(rsp)
	}
	return out, nil
}

func (rt *runtime) control(c string, raw map[string]json.RawMessage) (map[string]any, bool, error) {
	switch c {
	case "wait_plugins":
		n, err := num(raw, "count", 1)
		if err != nil {
			return nil, false, err
		}
		ms, err := num(raw, "timeout_ms", 5000)
		if err != nil {
			return nil, false, err
		}
		if err := noExtra(raw); err != nil {
			return nil, false, err
		}
		start := time.Now()
		deadline := time.After(time.Duration(ms) * time.Millisecond)
		for {
			cur, ch := rt.getCount()
			if int64(cur) >= n {
				return map[string]any{"count": cur, "elapsed_us": time.Since(start).Microseconds()}, false, nil
			}
			select {
			case <-ch:
			case <-deadline:
				return map[string]any{"count": cur}, false, errf("timeout waiting for %d plugins (have %d)", n, cur)
			}
		}

	case "list_plugins":
		if err := noExtra(raw); err != nil {
			return nil, false, err
		}
		return map[string]any{"plugins": rt.listPlugins()}, false, nil

	case "set_sync_state":
		var pods []*api.PodSandbox
		var ctrs []*api.Container
		if g, ok := raw["generate"]; ok {
			delete(raw, "generate")
			var gen struct {
				Pods             int `json:"pods"`
				ContainersPerPod int `json:"containers_per_pod"`
			}
			dec := json.NewDecoder(bytes.NewReader(g))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&gen); err != nil {
				return nil, false, errf("invalid generate: %v", err)
			}
			pods, ctrs = peer.State[api.PodSandbox, api.Container](gen.Pods, gen.ContainersPerPod)
		}
		if v, ok := raw["pods"]; ok {
			delete(raw, "pods")
			var items []json.RawMessage
			if err := json.Unmarshal(v, &items); err != nil {
				return nil, false, errf(`"pods" must be an array`)
			}
			for i, it := range items {
				p := &api.PodSandbox{}
				if err := peer.UnmarshalPJ(it, p); err != nil {
					return nil, false, errf("pods[%d]: %v", i, err)
				}
				pods = append(pods, p)
			}
		}
		if v, ok := raw["containers"]; ok {
			delete(raw, "containers")
			var items []json.RawMessage
			if err := json.Unmarshal(v, &items); err != nil {
				return nil, false, errf(`"containers" must be an array`)
			}
			for i, it := range items {
				c := &api.Container{}
				if err := peer.UnmarshalPJ(it, c); err != nil {
					return nil, false, errf("containers[%d]: %v", i, err)
				}
				ctrs = append(ctrs, c)
			}
		}
		if err := noExtra(raw); err != nil {
			return nil, false, err
		}
		size := 0
		for _, p := range pods {
			size += proto.Size(p)
		}
		for _, c := range ctrs {
			size += proto.Size(c)
		}
		rt.mu.Lock()
		rt.explicit, rt.syncPods, rt.syncCtrs = true, pods, ctrs
		rt.mu.Unlock()
		return map[string]any{"pods": len(pods), "containers": len(ctrs), "proto_bytes": size}, false, nil

	case "clear_sync_state":
		if err := noExtra(raw); err != nil {
			return nil, false, err
		}
		rt.mu.Lock()
		rt.explicit, rt.syncPods, rt.syncCtrs = false, nil, nil
		rt.mu.Unlock()
		return nil, false, nil

	case "state":
		if err := noExtra(raw); err != nil {
			return nil, false, err
		}
		rt.mu.Lock()
		defer rt.mu.Unlock()
		ctrs := make([]map[string]any, 0, len(rt.ctrOrder))
		for _, id := range rt.ctrOrder {
			c := rt.ctrs[id]
			ctrs = append(ctrs, map[string]any{"id": id, "pod_sandbox_id": c.PodSandboxId, "name": c.Name, "state": c.State.String()})
		}
		return map[string]any{"pods": append([]string{}, rt.podOrder...), "containers": ctrs, "explicit_sync_state": rt.explicit}, false, nil

	case "set_update_policy":
		p, err := str(raw, "policy")
		if err != nil {
			return nil, false, err
		}
		if err := noExtra(raw); err != nil {
			return nil, false, err
		}
		if !validPolicy(p) {
			return nil, false, errf("invalid policy %q (succeed | fail | error)", p)
		}
		rt.mu.Lock()
		rt.policy = p
		rt.mu.Unlock()
		return map[string]any{"policy": p}, false, nil

	case "stop":
		if err := noExtra(raw); err != nil {
			return nil, false, err
		}
		rt.a.Stop()
		return nil, true, nil
	}
	return nil, false, errf("unknown command %q", c)
}

// listPlugins reads the adaptation's (unexported) plugin list by reflection,
// under the adaptation's own lock. This relies on the field layout of
// pkg/adaptation v0.12.5 (plugins []*plugin; plugin{idx, base, pid, cmd,
// events, closed, policy}); the adaptation offers no public accessor.
func (rt *runtime) listPlugins() []map[string]any {
	rt.a.Lock()
	defer rt.a.Unlock()
	list := []map[string]any{}
	ps := reflect.ValueOf(rt.a).Elem().FieldByName("plugins")
	if !ps.IsValid() {
		return list
	}
	for i := 0; i < ps.Len(); i++ {
		p := ps.Index(i).Elem()
		idx := p.FieldByName("idx").String()
		base := p.FieldByName("base").String()
		mask := api.EventMask(p.FieldByName("events").Int())
		list = append(list, map[string]any{
			"name":           idx + "-" + base,
			"index":          idx,
			"base":           base,
			"pid":            p.FieldByName("pid").Int(),
			"external":       p.FieldByName("cmd").IsNil(),
			"events":         int32(mask),
			"events_pretty":  mask.PrettyString(),
			"closed":         p.FieldByName("closed").Bool(),
			"failure_policy": policyOf(p.FieldByName("policy")),
		})
	}
	return list
}

// policyOf describes a plugin's declared failure policy (an unexported
// *api.FailurePolicy field): nil when the plugin declared none.
func policyOf(v reflect.Value) any {
	if !v.IsValid() || v.IsNil() {
		return nil
	}
	e := v.Elem()
	return map[string]any{
		"fail_request":   e.FieldByName("FailRequest").Bool(),
		"keep_connected": e.FieldByName("KeepConnected").Bool(),
	}
}

func main() {
	o := parseFlags()
	out := peer.NewOut(os.Stdout)
	rt := &runtime{
		out:     out,
		pods:    map[string]*api.PodSandbox{},
		ctrs:    map[string]*api.Container{},
		policy:  o.updatePolicy,
		cntChng: make(chan struct{}),
	}

	adaptation.SetPluginRegistrationTimeout(o.regTimeout)
	adaptation.SetPluginRequestTimeout(o.reqTimeout)

	opts := []adaptation.Option{
		adaptation.WithPluginPath(o.pluginDir),
		adaptation.WithPluginConfigPath(o.configDir),
		adaptation.WithMetrics(&metrics{rt: rt}),
		adaptation.WithDeprecationRecorder(&deprecations{rt: rt}),
	}
	if o.noListen {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	} else {
		opts = append(opts, adaptation.WithSocketPath(o.socket))
	}
	if o.validator != nil {
		opts = append(opts, adaptation.WithDefaultValidator(o.validator))
	}
	a, err := adaptation.New(o.name, o.version, rt.syncFn, rt.updateFn, opts...)
	if err != nil {
		out.Emit(map[string]any{"async": "error", "error": "adaptation.New: " + err.Error()})
		os.Exit(peer.ExitFailure)
	}
	rt.a = a
	if err := a.Start(); err != nil {
		out.Emit(map[string]any{"async": "error", "error": "adaptation.Start: " + err.Error()})
		os.Exit(peer.ExitFailure)
	}
	out.Emit(map[string]any{"async": "started", "socket": o.socket, "nri_version": nriVersion, "runtime_name": o.name, "runtime_version": o.version})

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		a.Stop()
		out.Emit(map[string]any{"async": "stopped", "reason": s.String()})
		os.Exit(peer.ExitOK)
	}()

	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		res, stop := rt.handle(line)
		out.Emit(res)
		if stop {
			out.Emit(map[string]any{"async": "stopped", "reason": "stop command"})
			os.Exit(peer.ExitOK)
		}
	}
	a.Stop()
	reason := "stdin closed"
	if err := sc.Err(); err != nil {
		reason = "stdin error: " + err.Error()
	}
	out.Emit(map[string]any{"async": "stopped", "reason": reason})
	if sc.Err() != nil {
		os.Exit(peer.ExitFailure)
	}
}
