package peer

// The runtime peers' command loop: one JSON command a line on stdin, one
// result line for each on stdout (see interop/README.md for the schema).
// Event commands go to the Driver; the control commands are answered here.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

type cmdError struct {
	msg         string
	unsupported bool
}

func (e *cmdError) Error() string { return e.msg }

func errf(format string, args ...any) error { return &cmdError{msg: fmt.Sprintf(format, args...)} }

// Unsupported is the error of a command the peer's NRI version cannot
// carry out: its result line says "unsupported": true.
func Unsupported(format string, args ...any) error {
	return &cmdError{msg: fmt.Sprintf(format, args...), unsupported: true}
}

// NotSentByRuntime is the Unsupported error of an event that only plugins
// see (a request name Canon knows but no runtime sends).
func NotSentByRuntime(ev string) error { return Unsupported("%s cannot be sent by a runtime", ev) }

// Fatal reports a startup failure as an async error line and exits with
// ExitFailure.
func Fatal(out *Out, msg string) {
	out.Emit(map[string]any{"async": "error", "error": msg})
	os.Exit(ExitFailure)
}

// Serve announces the start (the flags' socket, name and version, and
// nriVersion), then runs the command loop with d until stdin ends, a stop
// command, or SIGINT/SIGTERM, and exits the process.
func (rt *Runtime[P, C, U]) Serve(d Driver, f RuntimeFlags, nriVersion string) {
	rt.d = d
	out := rt.Out
	out.Emit(map[string]any{"async": "started", "socket": f.Socket, "nri_version": nriVersion, "runtime_name": f.Name, "runtime_version": f.Version})

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		d.Stop()
		out.Emit(map[string]any{"async": "stopped", "reason": s.String()})
		os.Exit(ExitOK)
	}()

	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		res, stop := rt.handle(line)
		out.Emit(res)
		if stop {
			out.Emit(map[string]any{"async": "stopped", "reason": "stop command"})
			os.Exit(ExitOK)
		}
	}
	d.Stop()
	reason := "stdin closed"
	if err := sc.Err(); err != nil {
		reason = "stdin error: " + err.Error()
	}
	out.Emit(map[string]any{"async": "stopped", "reason": reason})
	if sc.Err() != nil {
		os.Exit(ExitFailure)
	}
	os.Exit(ExitOK)
}

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
func (rt *Runtime[P, C, U]) handle(line []byte) (res map[string]any, stop bool) {
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
	if c, ok := controlCommands[Norm(name)]; ok {
		res["cmd"] = c
		out, stop, err = rt.control(c, raw)
	} else if ev := Canon(name); ev != "" {
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

// event runs one lifecycle event command.
func (rt *Runtime[P, C, U]) event(ev string, raw map[string]json.RawMessage) (map[string]any, error) {
	spec, err := rt.d.Event(ev)
	if err != nil {
		return nil, err
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
	req := spec.New()
	if err := UnmarshalPJ(body, req); err != nil {
		return nil, errf("invalid %s request: %v", ev, err)
	}
	if err := rt.fill(req, podID, ctrID); err != nil {
		return nil, err
	}

	// Like containerd: no plugin may finish synchronizing while an event
	// is in flight, so a new plugin sees either the before or after state.
	unblock := rt.d.BlockPluginSync()
	start := time.Now()
	rsp, err := spec.Call(context.Background(), req)
	el := time.Since(start)
	unblock()

	out := map[string]any{"elapsed_us": el.Microseconds()}
	if err != nil {
		return out, err
	}
	if rsp != nil {
		out["response"] = PJ(rsp)
	}
	return out, nil
}

// fill sets the request's "pod"/"container" fields from tracked state when the
// command gave pod_id/container_id instead of inline objects (or gave a
// container whose pod_sandbox_id is known).
func (rt *Runtime[P, C, U]) fill(req proto.Message, podID, ctrID string) error {
	m := req.ProtoReflect()
	fields := m.Descriptor().Fields()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if fd := fields.ByName("container"); fd != nil && !m.Has(fd) && ctrID != "" {
		c, ok := rt.ctrs.m[ctrID]
		if !ok {
			return errf("unknown container_id %q", ctrID)
		}
		m.Set(fd, protoreflect.ValueOfMessage(proto.Clone(c).ProtoReflect()))
	}
	if fd := fields.ByName("pod"); fd != nil && !m.Has(fd) {
		if podID == "" {
			if cfd := fields.ByName("container"); cfd != nil && m.Has(cfd) {
				if c, ok := m.Get(cfd).Message().Interface().(C); ok {
					podID = c.GetPodSandboxId()
				}
			}
		}
		if podID != "" {
			p, ok := rt.pods.m[podID]
			if !ok {
				return errf("unknown pod_id %q", podID)
			}
			m.Set(fd, protoreflect.ValueOfMessage(proto.Clone(p).ProtoReflect()))
		}
	}
	return nil
}
