package main

// The lifecycle event commands: one request type and adaptation call per
// event, with the pod and container filled in from the tracked state.

import (
	"context"
	"encoding/json"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nri-rs/interop/peer"
)

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
