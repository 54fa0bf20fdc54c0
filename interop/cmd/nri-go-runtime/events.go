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
type eventSpec struct {
	newReq func() proto.Message
	call   func(ctx context.Context, d *driver, req proto.Message) (proto.Message, error)
}

// Event implements peer.Driver.
func (d *driver) Event(ev string) (peer.Event, error) {
	spec, ok := events[ev]
	if !ok {
		return peer.Event{}, peer.NotSentByRuntime(ev)
	}
	call := func(ctx context.Context, req proto.Message) (proto.Message, error) { return spec.call(ctx, d, req) }
	return peer.Event{New: spec.newReq, Call: call}, nil
}

var events = map[string]eventSpec{
	"RunPodSandbox": {
		func() proto.Message { return &api.RunPodSandboxRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.RunPodSandboxRequest)
			err := d.a.RunPodSandbox(ctx, req)
			if err == nil {
				d.rt.PutPod(req.Pod)
			}
			return nil, err
		},
	},
	"UpdatePodSandbox": {
		func() proto.Message { return &api.UpdatePodSandboxRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.UpdatePodSandboxRequest)
			rsp, err := d.a.UpdatePodSandbox(ctx, req)
			if err != nil {
				return nil, err
			}
			return rsp, nil
		},
	},
	"PostUpdatePodSandbox": {
		func() proto.Message { return &api.PostUpdatePodSandboxRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.PostUpdatePodSandboxRequest)
			err := d.a.PostUpdatePodSandbox(ctx, req)
			if err == nil {
				d.rt.PutPod(req.Pod)
			}
			return nil, err
		},
	},
	"StopPodSandbox": {
		func() proto.Message { return &api.StopPodSandboxRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			return nil, d.a.StopPodSandbox(ctx, m.(*api.StopPodSandboxRequest))
		},
	},
	"RemovePodSandbox": {
		func() proto.Message { return &api.RemovePodSandboxRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.RemovePodSandboxRequest)
			err := d.a.RemovePodSandbox(ctx, req)
			d.rt.DelPod(req.GetPod().GetId())
			return nil, err
		},
	},
	"CreateContainer": {
		func() proto.Message { return &api.CreateContainerRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.CreateContainerRequest)
			rsp, err := d.a.CreateContainer(ctx, req)
			if err != nil {
				return nil, err
			}
			d.rt.PutCtr(req.Container, api.ContainerState_CONTAINER_CREATED)
			return rsp, nil
		},
	},
	"PostCreateContainer": {
		func() proto.Message { return &api.PostCreateContainerRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			return nil, d.a.PostCreateContainer(ctx, m.(*api.PostCreateContainerRequest))
		},
	},
	"StartContainer": {
		func() proto.Message { return &api.StartContainerRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.StartContainerRequest)
			err := d.a.StartContainer(ctx, req)
			if err == nil {
				d.rt.SetCtrState(req.Container, api.ContainerState_CONTAINER_RUNNING)
			}
			return nil, err
		},
	},
	"PostStartContainer": {
		func() proto.Message { return &api.PostStartContainerRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			return nil, d.a.PostStartContainer(ctx, m.(*api.PostStartContainerRequest))
		},
	},
	"UpdateContainer": {
		func() proto.Message { return &api.UpdateContainerRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			rsp, err := d.a.UpdateContainer(ctx, m.(*api.UpdateContainerRequest))
			if err != nil {
				return nil, err
			}
			return rsp, nil
		},
	},
	"PostUpdateContainer": {
		func() proto.Message { return &api.PostUpdateContainerRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			return nil, d.a.PostUpdateContainer(ctx, m.(*api.PostUpdateContainerRequest))
		},
	},
	"StopContainer": {
		func() proto.Message { return &api.StopContainerRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
			req := m.(*api.StopContainerRequest)
			rsp, err := d.a.StopContainer(ctx, req)
			d.rt.SetCtrState(req.Container, api.ContainerState_CONTAINER_STOPPED)
			if err != nil {
				return nil, err
			}
			return rsp, nil
		},
	},
	"RemoveContainer": {
		func() proto.Message { return &api.RemoveContainerRequest{} },
		func(ctx context.Context, d *driver, m proto.Message) (proto.Message, error) {
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
	return peer.PluginList(d.a, prettyMask, func(p reflect.Value, item map[string]any) {
		item["failure_policy"] = policyOf(p.FieldByName("policy"))
	})
}

func prettyMask(m int32) string {
	mask := api.EventMask(m)
	return mask.PrettyString()
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
