// Package peer holds the helpers shared by the Go interop peers of both
// modules (interop, on the current containerd/nri, and interop/legacy, on
// v0.8.0): JSON-line output, protojson conversion, logging setup, event
// names, the plugins' adjustment flavours, the generated request shape,
// /proc readers, the runtime peers' command loop and state (Runtime), and
// the plugin peers' flags and event lines (Hooks).
// It imports no NRI package, so one copy serves both NRI versions; each
// module pulls it in with a replace directive. Where an NRI type is needed,
// the caller names its own (see Pod, Container, State, Runtime,
// Adjustment) or implements a small interface (see Driver).
package peer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Out writes one JSON object per line. Safe for concurrent use; every line is
// written with a single Write call while holding the lock.
type Out struct {
	mu sync.Mutex
	w  io.Writer
}

// NewOut returns a line writer on w.
func NewOut(w io.Writer) *Out { return &Out{w: w} }

// Emit marshals v (maps are emitted with sorted keys) and writes it as a line.
func (o *Out) Emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"error": "internal: cannot marshal output: " + err.Error()})
	}
	b = append(b, '\n')
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(b)
}

var pjOpts = protojson.MarshalOptions{UseProtoNames: true}

// PJ converts a message to compact protojson (proto field names). A nil
// message gives JSON null. Output is deterministic: protojson sorts map keys
// and the compaction removes its randomized whitespace.
func PJ(m proto.Message) json.RawMessage {
	if m == nil || !m.ProtoReflect().IsValid() {
		return json.RawMessage("null")
	}
	b, err := pjOpts.Marshal(m)
	if err != nil {
		s, _ := json.Marshal("protojson error: " + err.Error())
		return s
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return json.RawMessage(b)
	}
	return buf.Bytes()
}

// PJList converts a slice of messages; nil or empty gives an empty array.
func PJList[T proto.Message](ms []T) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		out = append(out, PJ(m))
	}
	return out
}

// UnmarshalPJ parses protojson (both proto and JSON field names accepted);
// unknown fields are an error.
func UnmarshalPJ(b []byte, m proto.Message) error {
	return protojson.Unmarshal(b, m)
}

// ErrString gives "" for nil.
func ErrString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// SetupLogging sends logrus (used by NRI's default logger) to stderr at the
// given level: debug, info, warn, error.
func SetupLogging(level string) error {
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return fmt.Errorf("invalid --log-level %q: %w", level, err)
	}
	logrus.SetOutput(os.Stderr)
	logrus.SetLevel(lvl)
	return nil
}

// Usage prints a usage error to stderr and exits with ExitUsage.
func Usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "usage error: "+format+"\n", args...)
	os.Exit(ExitUsage)
}

// Exit codes shared by all peers.
const (
	ExitOK      = 0 // clean end (stdin EOF, stop command, connection closed)
	ExitFailure = 1 // startup/registration failure or fatal runtime error
	ExitUsage   = 2 // bad flags or arguments
)

// ListFlag is a repeatable, comma-splitting string flag.
type ListFlag []string

func (l *ListFlag) String() string { return strings.Join(*l, ",") }

// Set appends comma-separated values.
func (l *ListFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
