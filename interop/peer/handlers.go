package peer

import (
	"context"

	"google.golang.org/protobuf/proto"
)

// Handlers are the stub handlers both plugin peers have in common: each
// prints its event line (see Hooks) and answers with nothing, but
// CreateContainer, which answers with Adjust's adjustment. The type
// parameters are the caller's *api.PodSandbox (P), *api.Container (C),
// *api.LinuxResources (R), *api.ContainerAdjustment (A) and
// *api.ContainerUpdate (U), so the methods have the signatures of that NRI
// version's stub interfaces.
type Handlers[P PodInfo, C CtrMsg, R, A, U proto.Message] struct {
	*Hooks
	// Adjust returns CreateContainer's adjustment (nil for none).
	Adjust func() A
}

// Shutdown implements the stub's ShutdownInterface.
func (h *Handlers[P, C, R, A, U]) Shutdown(context.Context) {
	_ = h.Hook("Shutdown", map[string]any{})
}

// RunPodSandbox implements the stub's RunPodSandboxInterface.
func (h *Handlers[P, C, R, A, U]) RunPodSandbox(_ context.Context, pod P) error {
	return h.Hook("RunPodSandbox", h.PodLine(pod))
}

// StopPodSandbox implements the stub's StopPodSandboxInterface.
func (h *Handlers[P, C, R, A, U]) StopPodSandbox(_ context.Context, pod P) error {
	return h.Hook("StopPodSandbox", h.PodLine(pod))
}

// RemovePodSandbox implements the stub's RemovePodSandboxInterface.
func (h *Handlers[P, C, R, A, U]) RemovePodSandbox(_ context.Context, pod P) error {
	return h.Hook("RemovePodSandbox", h.PodLine(pod))
}

// CreateContainer implements the stub's CreateContainerInterface.
func (h *Handlers[P, C, R, A, U]) CreateContainer(_ context.Context, pod P, c C) (A, []U, error) {
	adj := h.Adjust()
	l := h.CtrLine(pod, c)
	if h.dump {
		l["adjust"] = PJ(adj)
	}
	if err := h.Hook("CreateContainer", l); err != nil {
		var none A
		return none, nil, err
	}
	return adj, nil, nil
}

// PostCreateContainer implements the stub's PostCreateContainerInterface.
func (h *Handlers[P, C, R, A, U]) PostCreateContainer(_ context.Context, pod P, c C) error {
	return h.Hook("PostCreateContainer", h.CtrLine(pod, c))
}

// StartContainer implements the stub's StartContainerInterface.
func (h *Handlers[P, C, R, A, U]) StartContainer(_ context.Context, pod P, c C) error {
	return h.Hook("StartContainer", h.CtrLine(pod, c))
}

// PostStartContainer implements the stub's PostStartContainerInterface.
func (h *Handlers[P, C, R, A, U]) PostStartContainer(_ context.Context, pod P, c C) error {
	return h.Hook("PostStartContainer", h.CtrLine(pod, c))
}

// UpdateContainer implements the stub's UpdateContainerInterface.
func (h *Handlers[P, C, R, A, U]) UpdateContainer(_ context.Context, pod P, c C, res R) ([]U, error) {
	l := h.CtrLine(pod, c)
	if h.dump {
		l["linux_resources"] = PJ(res)
	}
	return nil, h.Hook("UpdateContainer", l)
}

// PostUpdateContainer implements the stub's PostUpdateContainerInterface.
func (h *Handlers[P, C, R, A, U]) PostUpdateContainer(_ context.Context, pod P, c C) error {
	return h.Hook("PostUpdateContainer", h.CtrLine(pod, c))
}

// StopContainer implements the stub's StopContainerInterface.
func (h *Handlers[P, C, R, A, U]) StopContainer(_ context.Context, pod P, c C) ([]U, error) {
	return nil, h.Hook("StopContainer", h.CtrLine(pod, c))
}

// RemoveContainer implements the stub's RemoveContainerInterface.
func (h *Handlers[P, C, R, A, U]) RemoveContainer(_ context.Context, pod P, c C) error {
	return h.Hook("RemoveContainer", h.CtrLine(pod, c))
}
