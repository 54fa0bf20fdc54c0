package peer

// The container event commands that every adaptation version sends alike
// (a request in, a response out): CreateContainer, UpdateContainer and
// StopContainer. A runtime peer names its adaptation's call; the request
// and response types are those of its NRI version.

import (
	"context"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ctrRequest is the caller's *api.CreateContainerRequest or
// *api.StopContainerRequest (the pointer to TQ): a request naming a
// container C.
type ctrRequest[TQ any, C CtrMsg] interface {
	*TQ
	proto.Message
	GetContainer() C
}

// ContainerStates are the caller's api.ContainerState values that the
// container commands set.
type ContainerStates struct {
	Created, Stopped protoreflect.Enum
}

// ContainerEvent returns the command ev when it is one of CreateContainer,
// UpdateContainer and StopContainer, over the adaptation's calls of those
// names (create, update, stop), tracking containers in rt:
//   - CreateContainer: a container let through is tracked as created;
//   - StopContainer: the container is marked stopped even when a plugin
//     failed.
//
// It reports false for any other event.
func ContainerEvent[
	CQ any, PCQ ctrRequest[CQ, C], CR proto.Message,
	UQ any, PUQ message[UQ], UR proto.Message,
	SQ any, PSQ ctrRequest[SQ, C], SR proto.Message,
	P PodMsg, C CtrMsg, U proto.Message,
](ev string, rt *Runtime[P, C, U], st ContainerStates,
	create func(context.Context, PCQ) (CR, error),
	update func(context.Context, PUQ) (UR, error),
	stop func(context.Context, PSQ) (SR, error),
) (Event, bool) {
	switch ev {
	case "CreateContainer":
		return request(func(ctx context.Context, req PCQ) (proto.Message, error) {
			rsp, err := create(ctx, req)
			if err != nil {
				return nil, err
			}
			rt.PutCtr(req.GetContainer(), st.Created)
			return rsp, nil
		}), true
	case "UpdateContainer":
		return request(func(ctx context.Context, req PUQ) (proto.Message, error) {
			rsp, err := update(ctx, req)
			if err != nil {
				return nil, err
			}
			return rsp, nil
		}), true
	case "StopContainer":
		return request(func(ctx context.Context, req PSQ) (proto.Message, error) {
			rsp, err := stop(ctx, req)
			rt.SetCtrState(req.GetContainer(), st.Stopped)
			if err != nil {
				return nil, err
			}
			return rsp, nil
		}), true
	}
	return Event{}, false
}

// request is the Event whose request is a new PQ, handed to call as such.
func request[PQ proto.Message](call func(context.Context, PQ) (proto.Message, error)) Event {
	return Event{
		New: func() proto.Message { return newOf[PQ]() },
		Call: func(ctx context.Context, m proto.Message) (proto.Message, error) {
			return call(ctx, m.(PQ))
		},
	}
}
