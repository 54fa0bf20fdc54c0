package main

// The command loop's parsing of one line, and the control commands
// (wait_plugins, list_plugins, sync state, update policy, stop).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"

	"github.com/nri-rs/interop/peer"
)

type cmdError struct {
	msg         string
	unsupported bool
}

func (e *cmdError) Error() string { return e.msg }

func errf(format string, args ...any) error { return &cmdError{msg: fmt.Sprintf(format, args...)} }

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
