package main

// The lifecycle event commands: one request type and adaptation call per
// event, with the tracked state updated after the call.

import (
	"context"
	"reflect"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"

	"github.com/nri-rs/interop/peer"
)

// eventSpec describes one lifecycle event command.
type eventSpec = peer.EventSpec[*driver]

// Event implements peer.Driver.
func (d *driver) Event(ev string) (peer.Event, error) {
	if e, ok := peer.ContainerEvent(ev, d.rt, states, d.a.CreateContainer, d.a.UpdateContainer, d.a.StopContainer); ok {
		return e, nil
	}
	spec, ok := events[ev]
	if !ok {
		return peer.Event{}, peer.NotSentByRuntime(ev)
	}
	return spec.Bind(d), nil
}

// states are the container states the shared container commands set.
var states = peer.ContainerStates{Created: api.ContainerState_CONTAINER_CREATED, Stopped: api.ContainerState_CONTAINER_STOPPED}

// events are the event commands other than the shared container commands
// (see peer.ContainerEvent).
var events = map[string]eventSpec{
	"RunPodSandbox": {
		New: func() proto.Message { return &api.RunPodSandboxRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.RunPodSandboxRequest)
			err := d.a.RunPodSandbox(ctx, req)
			if err == nil {
				d.rt.PutPod(req.Pod)
			}
			return nil, err
		},
	},
	"UpdatePodSandbox": {
		New: func() proto.Message { return &api.UpdatePodSandboxRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.UpdatePodSandboxRequest)
			rsp, err := d.a.UpdatePodSandbox(ctx, req)
			if err != nil {
				return nil, err
			}
			return rsp, nil
		},
	},
	"PostUpdatePodSandbox": {
		New: func() proto.Message { return &api.PostUpdatePodSandboxRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.PostUpdatePodSandboxRequest)
			err := d.a.PostUpdatePodSandbox(ctx, req)
			if err == nil {
				d.rt.PutPod(req.Pod)
			}
			return nil, err
		},
	},
	"StopPodSandbox": {
		New: func() proto.Message { return &api.StopPodSandboxRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			return nil, d.a.StopPodSandbox(ctx, m.(*api.StopPodSandboxRequest))
		},
	},
	"RemovePodSandbox": {
		New: func() proto.Message { return &api.RemovePodSandboxRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.RemovePodSandboxRequest)
			err := d.a.RemovePodSandbox(ctx, req)
			d.rt.DelPod(req.GetPod().GetId())
			return nil, err
		},
	},
	"PostCreateContainer": {
		New: func() proto.Message { return &api.PostCreateContainerRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			return nil, d.a.PostCreateContainer(ctx, m.(*api.PostCreateContainerRequest))
		},
	},
	"StartContainer": {
		New: func() proto.Message { return &api.StartContainerRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.StartContainerRequest)
			err := d.a.StartContainer(ctx, req)
			if err == nil {
				d.rt.SetCtrState(req.Container, api.ContainerState_CONTAINER_RUNNING)
			}
			return nil, err
		},
	},
	"PostStartContainer": {
		New: func() proto.Message { return &api.PostStartContainerRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			return nil, d.a.PostStartContainer(ctx, m.(*api.PostStartContainerRequest))
		},
	},
	"PostUpdateContainer": {
		New: func() proto.Message { return &api.PostUpdateContainerRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			return nil, d.a.PostUpdateContainer(ctx, m.(*api.PostUpdateContainerRequest))
		},
	},
	"RemoveContainer": {
		New: func() proto.Message { return &api.RemoveContainerRequest{} },
		Call: func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.RemoveContainerRequest)
			err := d.a.RemoveContainer(ctx, req)
			d.rt.DelCtr(req.GetContainer().GetId())
			return nil, err
		},
	},
}

// ListPlugins implements peer.Driver: the plugin list of pkg/adaptation
// v0.12.5, where a plugin also keeps its declared failure policy (policy).
func (d *driver) ListPlugins() []map[string]any {
	d.a.Lock()
	defer d.a.Unlock()
	return peer.PluginList(d.a, peer.MaskString[api.EventMask], func(p reflect.Value, item map[string]any) {
		item["failure_policy"] = policyOf(p.FieldByName("policy"))
	})
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
