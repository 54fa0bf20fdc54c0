// Command nri-go-runtime-legacy is nri-go-runtime built on the older reference
// Go adaptation (github.com/containerd/nri v0.8.0, pkg/adaptation): the
// dialect of containerd 2.0/2.1. Pod events and the container notifications
// travel as StateChange, plugins may subscribe only to events in 0x7FF, and
// UpdatePodSandbox/PostUpdatePodSandbox do not exist (reported as
// unsupported). No Metrics hook exists, so the plugin count is polled.
//
// It reads JSON commands from stdin, one per line, and writes one JSON result
// line per command to stdout. Asynchronous happenings (plugin synchronization,
// unsolicited UpdateContainers from plugins, plugin count changes) are written as lines carrying an "async" key. Logs go to stderr.
// See interop/README.md for the schema. The command loop and the tracked
// state are the shared peer.Runtime; this command is its Driver over the
// v0.8.0 adaptation.
package main

import (
	"context"
	"os"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"

	"github.com/nri-rs/interop/peer"
)

const nriVersion = "v0.8.0"

// runtime is the shared runtime peer for this NRI version's types.
type runtime = peer.Runtime[*api.PodSandbox, *api.Container, *api.ContainerUpdate]

// driver is the peer.Driver over the v0.8.0 adaptation.
type driver struct {
	rt *runtime
	a  *adaptation.Adaptation
}

func main() {
	o := peer.ParseRuntimeFlags("nri-go-runtime-legacy", nriVersion,
		adaptation.DefaultPluginRegistrationTimeout, adaptation.DefaultPluginRequestTimeout, nil)
	out := peer.NewOut(os.Stdout)
	rt := peer.NewRuntime[*api.PodSandbox, *api.Container, *api.ContainerUpdate](out, o.UpdatePolicy)

	adaptation.SetPluginRegistrationTimeout(o.RegTimeout)
	adaptation.SetPluginRequestTimeout(o.ReqTimeout)

	opts := []adaptation.Option{
		adaptation.WithPluginPath(o.PluginDir),
		adaptation.WithPluginConfigPath(o.ConfigDir),
	}
	if o.NoListen {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	} else {
		opts = append(opts, adaptation.WithSocketPath(o.Socket))
	}
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error { return rt.Sync(ctx, cb) }
	a, err := adaptation.New(o.Name, o.Version, syncFn, rt.Update, opts...)
	if err != nil {
		peer.Fatal(out, "adaptation.New: "+err.Error())
	}
	if err := a.Start(); err != nil {
		peer.Fatal(out, "adaptation.Start: "+err.Error())
	}
	d := &driver{rt: rt, a: a}
	go d.pollCount()
	rt.Serve(d, o, nriVersion)
}

// pollCount reports the number of registered, not closed plugins. v0.8.0 has
// no Metrics hook; a plugin is appended to the list only after its
// Synchronize succeeded, so a listed plugin is registered and synchronized.
func (d *driver) pollCount() {
	for {
		n := 0
		for _, p := range d.ListPlugins() {
			if !p["closed"].(bool) {
				n++
			}
		}
		d.rt.SetCount(n)
		time.Sleep(5 * time.Millisecond)
	}
}

func (d *driver) BlockPluginSync() func() { return d.a.BlockPluginSync().Unblock }

func (d *driver) Stop() { d.a.Stop() }

// eventSpec describes one lifecycle event command.
type eventSpec = peer.EventSpec[*driver]

// Event implements peer.Driver.
func (d *driver) Event(ev string) (peer.Event, error) {
	if e, ok := peer.ContainerEvent(ev, d.rt, states, d.a.CreateContainer, d.a.UpdateContainer, d.a.StopContainer); ok {
		return e, nil
	}
	spec, ok := events[ev]
	if !ok {
		if ev == "UpdatePodSandbox" || ev == "PostUpdatePodSandbox" {
			return peer.Event{}, peer.Unsupported("%s is not supported by NRI %s", ev, nriVersion)
		}
		return peer.Event{}, peer.NotSentByRuntime(ev)
	}
	return spec.Bind(d), nil
}

// stateChange builds the spec of an event relayed through StateChange.
func stateChange(call func(a *adaptation.Adaptation, ctx context.Context, evt *api.StateChangeEvent) error,
	after func(d *driver, evt *api.StateChangeEvent, err error)) eventSpec {
	return eventSpec{
		New: func() proto.Message { return &api.StateChangeEvent{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			evt := m.(*api.StateChangeEvent)
			err := call(d.a, ctx, evt)
			if after != nil {
				after(d, evt, err)
			}
			return nil, err
		},
	}
}

// states are the container states the shared container commands set.
var states = peer.ContainerStates{Created: api.ContainerState_CONTAINER_CREATED, Stopped: api.ContainerState_CONTAINER_STOPPED}

// events are the event commands other than the shared container commands
// (see peer.ContainerEvent).
var events = map[string]eventSpec{
	"RunPodSandbox": stateChange((*adaptation.Adaptation).RunPodSandbox, func(d *driver, evt *api.StateChangeEvent, err error) {
		if err == nil {
			d.rt.PutPod(evt.Pod)
		}
	}),
	"StopPodSandbox": stateChange((*adaptation.Adaptation).StopPodSandbox, nil),
	"RemovePodSandbox": stateChange((*adaptation.Adaptation).RemovePodSandbox, func(d *driver, evt *api.StateChangeEvent, _ error) {
		d.rt.DelPod(evt.GetPod().GetId())
	}),
	"PostCreateContainer": stateChange((*adaptation.Adaptation).PostCreateContainer, nil),
	"StartContainer": stateChange((*adaptation.Adaptation).StartContainer, func(d *driver, evt *api.StateChangeEvent, err error) {
		if err == nil {
			d.rt.SetCtrState(evt.Container, api.ContainerState_CONTAINER_RUNNING)
		}
	}),
	"PostStartContainer":  stateChange((*adaptation.Adaptation).PostStartContainer, nil),
	"PostUpdateContainer": stateChange((*adaptation.Adaptation).PostUpdateContainer, nil),
	"RemoveContainer": stateChange((*adaptation.Adaptation).RemoveContainer, func(d *driver, evt *api.StateChangeEvent, _ error) {
		d.rt.DelCtr(evt.GetContainer().GetId())
	}),
}

// ListPlugins implements peer.Driver: the plugin list of pkg/adaptation
// v0.8.0.
func (d *driver) ListPlugins() []map[string]any {
	d.a.Lock()
	defer d.a.Unlock()
	return peer.PluginList(d.a, peer.MaskString[api.EventMask], nil)
}
