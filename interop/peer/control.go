package peer

// The runtime peers' control commands: wait_plugins, list_plugins, the
// explicit sync state, state, set_update_policy and stop.

import (
	"bytes"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/proto"
)

func (rt *Runtime[P, C, U]) control(c string, raw map[string]json.RawMessage) (map[string]any, bool, error) {
	if c == "wait_plugins" {
		out, err := rt.waitPlugins(raw)
		return out, false, err
	}
	if c == "set_sync_state" {
		out, err := rt.setSyncState(raw)
		return out, false, err
	}
	if c == "set_update_policy" {
		out, err := rt.setUpdatePolicy(raw)
		return out, false, err
	}
	if err := noExtra(raw); err != nil {
		return nil, false, err
	}
	switch c {
	case "list_plugins":
		return map[string]any{"plugins": rt.d.ListPlugins()}, false, nil
	case "clear_sync_state":
		rt.mu.Lock()
		rt.explicit, rt.syncPods, rt.syncCtrs = false, nil, nil
		rt.mu.Unlock()
		return nil, false, nil
	case "state":
		return rt.state(), false, nil
	case "stop":
		rt.d.Stop()
		return nil, true, nil
	}
	return nil, false, errf("unknown command %q", c)
}

func (rt *Runtime[P, C, U]) waitPlugins(raw map[string]json.RawMessage) (map[string]any, error) {
	n, err := num(raw, "count", 1)
	if err != nil {
		return nil, err
	}
	ms, err := num(raw, "timeout_ms", 5000)
	if err != nil {
		return nil, err
	}
	if err := noExtra(raw); err != nil {
		return nil, err
	}
	start := time.Now()
	deadline := time.After(time.Duration(ms) * time.Millisecond)
	for {
		cur, ch := rt.getCount()
		if int64(cur) >= n {
			return map[string]any{"count": cur, "elapsed_us": time.Since(start).Microseconds()}, nil
		}
		select {
		case <-ch:
		case <-deadline:
			return map[string]any{"count": cur}, errf("timeout waiting for %d plugins (have %d)", n, cur)
		}
	}
}

func (rt *Runtime[P, C, U]) setSyncState(raw map[string]json.RawMessage) (map[string]any, error) {
	var pods []P
	var ctrs []C
	if g, ok := raw["generate"]; ok {
		delete(raw, "generate")
		var gen struct {
			Pods             int `json:"pods"`
			ContainersPerPod int `json:"containers_per_pod"`
		}
		dec := json.NewDecoder(bytes.NewReader(g))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&gen); err != nil {
			return nil, errf("invalid generate: %v", err)
		}
		pods, ctrs = generate[P, C](gen.Pods, gen.ContainersPerPod)
	}
	more, err := items[P](raw, "pods")
	if err != nil {
		return nil, err
	}
	pods = append(pods, more...)
	moreCtrs, err := items[C](raw, "containers")
	if err != nil {
		return nil, err
	}
	ctrs = append(ctrs, moreCtrs...)
	if err := noExtra(raw); err != nil {
		return nil, err
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
	return map[string]any{"pods": len(pods), "containers": len(ctrs), "proto_bytes": size}, nil
}

// items takes raw[key], an array of protojson messages, out of raw.
func items[M proto.Message](raw map[string]json.RawMessage, key string) ([]M, error) {
	v, ok := raw[key]
	if !ok {
		return nil, nil
	}
	delete(raw, key)
	var docs []json.RawMessage
	if err := json.Unmarshal(v, &docs); err != nil {
		return nil, errf("%q must be an array", key)
	}
	var ms []M
	for i, doc := range docs {
		m := newOf[M]()
		if err := UnmarshalPJ(doc, m); err != nil {
			return nil, errf("%s[%d]: %v", key, i, err)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

func (rt *Runtime[P, C, U]) state() map[string]any {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ctrs := make([]map[string]any, 0, len(rt.ctrs.order))
	for _, id := range rt.ctrs.order {
		c := rt.ctrs.m[id]
		ctrs = append(ctrs, map[string]any{"id": id, "pod_sandbox_id": c.GetPodSandboxId(), "name": c.GetName(), "state": stateName(c)})
	}
	return map[string]any{"pods": append([]string{}, rt.pods.order...), "containers": ctrs, "explicit_sync_state": rt.explicit}
}

func (rt *Runtime[P, C, U]) setUpdatePolicy(raw map[string]json.RawMessage) (map[string]any, error) {
	p, err := str(raw, "policy")
	if err != nil {
		return nil, err
	}
	if err := noExtra(raw); err != nil {
		return nil, err
	}
	if !ValidPolicy(p) {
		return nil, errf("invalid policy %q (succeed | fail | error)", p)
	}
	rt.mu.Lock()
	rt.policy = p
	rt.mu.Unlock()
	return map[string]any{"policy": p}, nil
}
