package peer

// The part of a runtime peer (nri-go-runtime, nri-go-runtime-legacy) that
// does not depend on the NRI version: the tracked pods and containers, the
// plugin count, and the answers to the adaptation's synchronize and
// unsolicited-update callbacks. The NRI-specific part is a Driver; the
// command loop over both is in command.go.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Driver is what a runtime peer does with its own NRI version's
// adaptation. Every method may be called from the command loop only.
type Driver interface {
	// Event returns the lifecycle event command ev (a canonical event name,
	// see Canon), or an error made with Unsupported when the adaptation
	// cannot send it.
	Event(ev string) (Event, error)
	// BlockPluginSync keeps plugins from finishing their synchronization
	// until the returned function is called.
	BlockPluginSync() (unblock func())
	// ListPlugins describes the adaptation's plugins, one object each.
	ListPlugins() []map[string]any
	// Stop stops the adaptation.
	Stop()
}

// Event is one lifecycle event command of a Driver.
type Event struct {
	// New returns an empty request (the message the command's JSON fills).
	New func() proto.Message
	// Call sends the filled request to the plugins and updates the tracked
	// state (Runtime.PutPod and friends); it returns the response to report,
	// or nil.
	Call func(ctx context.Context, req proto.Message) (proto.Message, error)
}

// EventSpec is a lifecycle event command of the runtime peer whose driver
// is D, written once for every driver: Bind gives it for one driver.
type EventSpec[D any] struct {
	// New returns an empty request, as Event.New.
	New func() proto.Message
	// Call is Event.Call for driver d.
	Call func(ctx context.Context, d D, req proto.Message) (proto.Message, error)
}

// Bind returns the command for driver d.
func (s EventSpec[D]) Bind(d D) Event {
	return Event{New: s.New, Call: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		return s.Call(ctx, d, req)
	}}
}

// PodMsg is the caller's *api.PodSandbox.
type PodMsg interface {
	proto.Message
	GetId() string
}

// CtrMsg is the caller's *api.Container.
type CtrMsg interface {
	proto.Message
	GetId() string
	GetPodSandboxId() string
	GetName() string
}

// Runtime is the fake container runtime around an adaptation, for the
// caller's *api.PodSandbox (P), *api.Container (C) and *api.ContainerUpdate
// (U).
type Runtime[P PodMsg, C CtrMsg, U proto.Message] struct {
	// Out is where the result and async lines go.
	Out *Out
	d   Driver

	mu       sync.Mutex
	pods     ordered[P]
	ctrs     ordered[C]
	explicit bool
	syncPods []P
	syncCtrs []C
	policy   string

	cntMu   sync.Mutex
	count   int
	cntChng chan struct{} // closed and replaced on every count change
}

// NewRuntime returns a runtime with no pods or containers, writing to out
// and answering unsolicited updates by policy (see ValidPolicy).
func NewRuntime[P PodMsg, C CtrMsg, U proto.Message](out *Out, policy string) *Runtime[P, C, U] {
	return &Runtime[P, C, U]{
		Out:     out,
		pods:    newOrdered[P](),
		ctrs:    newOrdered[C](),
		policy:  policy,
		cntChng: make(chan struct{}),
	}
}

// ValidPolicy reports whether p is an answer to unsolicited updates:
// succeed, fail or error.
func ValidPolicy(p string) bool { return p == "succeed" || p == "fail" || p == "error" }

// SetCount records the number of registered plugins and reports a change.
func (rt *Runtime[P, C, U]) SetCount(n int) {
	rt.cntMu.Lock()
	changed := n != rt.count
	rt.count = n
	if changed {
		close(rt.cntChng)
		rt.cntChng = make(chan struct{})
	}
	rt.cntMu.Unlock()
	if changed {
		rt.Out.Emit(map[string]any{"async": "plugin_count", "count": n})
	}
}

func (rt *Runtime[P, C, U]) getCount() (int, chan struct{}) {
	rt.cntMu.Lock()
	defer rt.cntMu.Unlock()
	return rt.count, rt.cntChng
}

// snapshot returns the state handed to a synchronizing plugin.
func (rt *Runtime[P, C, U]) snapshot() ([]P, []C, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.explicit {
		return rt.syncPods, rt.syncCtrs, true
	}
	return rt.pods.values(), rt.ctrs.values(), false
}

// Sync is the adaptation's synchronize callback: it hands the tracked (or
// explicitly set) state to cb and reports the outcome.
func (rt *Runtime[P, C, U]) Sync(ctx context.Context, cb func(context.Context, []P, []C) ([]U, error)) error {
	pods, ctrs, explicit := rt.snapshot()
	start := time.Now()
	updates, err := cb(ctx, pods, ctrs)
	el := time.Since(start)
	line := map[string]any{
		"async": "synchronize", "pods": len(pods), "containers": len(ctrs),
		"explicit_state": explicit, "elapsed_us": el.Microseconds(),
		"updates": PJList(updates),
	}
	if err != nil {
		line["error"] = err.Error()
	}
	rt.Out.Emit(line)
	return err
}

// Update is the adaptation's callback for unsolicited container updates:
// it answers by the current policy and reports the updates.
func (rt *Runtime[P, C, U]) Update(_ context.Context, updates []U) ([]U, error) {
	rt.mu.Lock()
	policy := rt.policy
	rt.mu.Unlock()
	var (
		failed []U
		err    error
	)
	switch policy {
	case "fail":
		failed = updates
	case "error":
		err = errors.New("unsolicited container update rejected by policy")
	}
	line := map[string]any{
		"async": "update_containers", "policy": policy,
		"updates": PJList(updates), "failed": PJList(failed),
	}
	if err != nil {
		line["error"] = err.Error()
	}
	rt.Out.Emit(line)
	return failed, err
}

// --- state tracking -------------------------------------------------------

// PutPod tracks (a copy of) p; a pod without an id is ignored.
func (rt *Runtime[P, C, U]) PutPod(p P) {
	id := p.GetId()
	if id == "" {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.pods.put(id, proto.Clone(p).(P))
}

// DelPod forgets the pod id.
func (rt *Runtime[P, C, U]) DelPod(id string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.pods.del(id)
}

// PutCtr tracks (a copy of) c in the given state (its own state when state
// is the zero value); a container without an id is ignored.
func (rt *Runtime[P, C, U]) PutCtr(c C, state protoreflect.Enum) {
	id := c.GetId()
	if id == "" {
		return
	}
	cc := proto.Clone(c).(C)
	if state.Number() != 0 {
		setState(cc, state)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.ctrs.put(id, cc)
}

// SetCtrState sets the state of the tracked container with c's id, if any.
func (rt *Runtime[P, C, U]) SetCtrState(c C, state protoreflect.Enum) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if cur, ok := rt.ctrs.m[c.GetId()]; ok {
		setState(cur, state)
	}
}

// DelCtr forgets the container id.
func (rt *Runtime[P, C, U]) DelCtr(id string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.ctrs.del(id)
}

// ordered maps ids to values and keeps the ids in the order they were
// first put (the order a synchronizing plugin and `state` see them in).
type ordered[T any] struct {
	m     map[string]T
	order []string
}

func newOrdered[T any]() ordered[T] { return ordered[T]{m: map[string]T{}} }

// put sets id's value; a new id goes last.
func (o *ordered[T]) put(id string, v T) {
	if _, ok := o.m[id]; !ok {
		o.order = append(o.order, id)
	}
	o.m[id] = v
}

// del forgets id, if it is there.
func (o *ordered[T]) del(id string) {
	if _, ok := o.m[id]; !ok {
		return
	}
	delete(o.m, id)
	kept := o.order[:0]
	for _, x := range o.order {
		if x != id {
			kept = append(kept, x)
		}
	}
	o.order = kept
}

// values lists the values in order.
func (o *ordered[T]) values() []T {
	out := make([]T, 0, len(o.order))
	for _, id := range o.order {
		out = append(out, o.m[id])
	}
	return out
}

// setState sets a container's "state" enum field.
func setState(c proto.Message, state protoreflect.Enum) {
	m := c.ProtoReflect()
	if fd := m.Descriptor().Fields().ByName("state"); fd != nil {
		m.Set(fd, protoreflect.ValueOfEnum(state.Number()))
	}
}

// stateName gives a container's "state" as the enum's String does: the
// value's name, or its number when the value is not known.
func stateName(c proto.Message) string {
	m := c.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("state")
	if fd == nil || fd.Enum() == nil {
		return ""
	}
	n := m.Get(fd).Enum()
	if v := fd.Enum().Values().ByNumber(n); v != nil {
		return string(v.Name())
	}
	return strconv.Itoa(int(n))
}
