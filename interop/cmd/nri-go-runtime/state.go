package main

// The scripted runtime's state: the tracked pods and containers, the plugin
// count, and the callbacks the adaptation calls (sync, unsolicited updates,
// metrics, deprecation warnings).

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"

	"github.com/nri-rs/interop/peer"
)

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
