package peer

// The part of a plugin peer (nri-go-plugin, nri-go-plugin-legacy) that does
// not depend on the NRI version: its flags, the event lines with their
// injected delays and failures, and the unsolicited update after
// Synchronize. Each peer keeps its stub's handler methods, which name its
// own NRI version's types, and calls these.

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
)

// PluginFlags are the flags both plugin peers take.
type PluginFlags struct {
	Socket      string
	Name        string
	Idx         string
	Events      string
	Adjust      ListFlag
	Unsolicited string
	FailEvents  ListFlag
	DelayEvents ListFlag
	ExitOnClose bool
	Dump        bool
	Bench       bool
	LogLevel    string
}

// ParsePluginFlags defines the plugin flags on the command line (with the
// NRI version's default socket and its help for --name and --events),
// parses it and sets up logging. The caller defines its own flags before.
// A usage error exits (see Usage).
func ParsePluginFlags(defaultSocket, nameHelp, eventsHelp string) PluginFlags {
	var o PluginFlags
	flag.StringVar(&o.Socket, "socket", defaultSocket, "runtime socket to dial (ignored when NRI_PLUGIN_SOCKET is set by a launching runtime)")
	flag.StringVar(&o.Name, "name", "go-plugin", nameHelp)
	flag.StringVar(&o.Idx, "idx", "50", "plugin index, two digits (NRI_PLUGIN_IDX from a launching runtime takes precedence)")
	flag.StringVar(&o.Events, "events", "", eventsHelp)
	flag.Var(&o.Adjust, "adjust", "CreateContainer adjustment flavour(s), comma-separated: none | adjusting (= env,annotation) | env | annotation | mount | device | rlimit | resources | remove-env=KEY")
	flag.StringVar(&o.Unsolicited, "unsolicited-update", "", "after Synchronize, send UpdateContainers for the container with this name or ID")
	flag.Var(&o.FailEvents, "fail-event", "return an error for this event (repeatable, comma-separated; e.g. CreateContainer, Configure, Synchronize)")
	flag.Var(&o.DelayEvents, "delay-event", "sleep before answering: NAME=DURATION (repeatable, comma-separated)")
	flag.BoolVar(&o.ExitOnClose, "exit-on-close", true, "exit when the runtime connection closes (false: stay alive until SIGINT/SIGTERM)")
	flag.BoolVar(&o.Dump, "dump", false, "include full pod/container/resources protojson in event lines")
	flag.BoolVar(&o.Bench, "bench", false, "benchmark mode: implement only Synchronize/CreateContainer/StartContainer, print nothing per event")
	flag.StringVar(&o.LogLevel, "log-level", "warn", "stderr log level: debug | info | warn | error")
	flag.Parse()
	if flag.NArg() != 0 {
		Usage("unexpected arguments: %v", flag.Args())
	}
	if err := SetupLogging(o.LogLevel); err != nil {
		Usage("%v", err)
	}
	return o
}

// Hooks writes a plugin peer's event lines and applies the delays and
// failures its flags inject.
type Hooks struct {
	// Name is the plugin's full name (index-name), set once it is known.
	Name  string
	out   *Out
	dump  bool
	fail  map[string]bool
	delay map[string]time.Duration
	seq   atomic.Int64
}

// NewHooks parses --fail-event and --delay-event of o (a usage error exits)
// and writes to out.
func NewHooks(out *Out, o PluginFlags) *Hooks {
	h := &Hooks{out: out, dump: o.Dump, fail: map[string]bool{}, delay: map[string]time.Duration{}}
	for _, e := range o.FailEvents {
		c := Canon(e)
		if c == "" {
			Usage("unknown event %q in --fail-event", e)
		}
		h.fail[c] = true
	}
	for _, e := range o.DelayEvents {
		k, v, ok := strings.Cut(e, "=")
		c := Canon(k)
		d, err := time.ParseDuration(v)
		if !ok || c == "" || err != nil {
			Usage("invalid --delay-event %q (want NAME=DURATION)", e)
		}
		h.delay[c] = d
	}
	return h
}

// Hook prints the event line, then applies the configured delay and failure.
func (h *Hooks) Hook(ev string, line map[string]any) error {
	line["event"] = ev
	line["plugin"] = h.Name
	line["seq"] = h.seq.Add(1)
	h.out.Emit(line)
	if d, ok := h.delay[ev]; ok {
		time.Sleep(d)
	}
	if h.fail[ev] {
		return fmt.Errorf("%s: injected failure for %s", h.Name, ev)
	}
	return nil
}

// Dump reports whether event lines carry the full messages (--dump).
func (h *Hooks) Dump() bool { return h.dump }

// PodInfo is the caller's *api.PodSandbox, as the event lines use it.
type PodInfo interface {
	PodMsg
	GetName() string
	GetUid() string
	GetNamespace() string
}

// PodLine starts the event line of a pod event.
func (h *Hooks) PodLine(pod PodInfo) map[string]any {
	l := map[string]any{
		"pod_id": pod.GetId(), "pod_name": pod.GetName(),
		"pod_uid": pod.GetUid(), "pod_namespace": pod.GetNamespace(),
	}
	if h.dump {
		l["pod"] = PJ(pod)
	}
	return l
}

// CtrLine starts the event line of a container event.
func (h *Hooks) CtrLine(pod PodInfo, c CtrMsg) map[string]any {
	l := h.PodLine(pod)
	l["container_id"] = c.GetId()
	l["container_name"] = c.GetName()
	if h.dump {
		l["container"] = PJ(c)
	}
	return l
}

// SyncLine is the event line of Synchronize (its ids with --dump).
func SyncLine[P PodMsg, C CtrMsg](h *Hooks, pods []P, ctrs []C) map[string]any {
	line := map[string]any{"pods": len(pods), "containers": len(ctrs)}
	if h.dump {
		pids, cids := []string{}, []string{}
		for _, x := range pods {
			pids = append(pids, x.GetId())
		}
		for _, x := range ctrs {
			cids = append(cids, x.GetId())
		}
		line["pod_ids"], line["container_ids"] = pids, cids
	}
	return line
}

// SendUnsolicited finds the container nameOrID among ctrs (the containers
// of Synchronize) and, in the background, asks the runtime through send
// (the stub's UpdateContainers) to set its CPU shares to 512 and its memory
// limit to 1 GiB, then reports an update_containers line (with an error when there is no such
// container).
func SendUnsolicited[C CtrMsg, U proto.Message](h *Hooks, ctrs []C, nameOrID string, send func([]U) ([]U, error)) {
	id, found := "", false
	for _, c := range ctrs {
		if c.GetName() == nameOrID || c.GetId() == nameOrID {
			id, found = c.GetId(), true
			break
		}
	}
	go func() {
		line := map[string]any{"event": "update_containers", "plugin": h.Name, "seq": h.seq.Add(1)}
		if !found {
			line["error"] = fmt.Sprintf("container %q not found in Synchronize", nameOrID)
			h.out.Emit(line)
			return
		}
		u := decodeAs[U](unsolicitedDoc(id))
		failed, err := send([]U{u})
		line["request"] = PJList([]U{u})
		line["failed"] = PJList(failed)
		if err != nil {
			line["error"] = err.Error()
		}
		h.out.Emit(line)
	}()
}

// OnClose returns the stub's on-close callback and a channel closed by it:
// it reports the close (unless bench) and exits when exitOnClose.
func (h *Hooks) OnClose(bench, exitOnClose bool) (func(), <-chan struct{}) {
	closed := make(chan struct{})
	var once sync.Once
	return func() {
		once.Do(func() {
			if !bench {
				h.out.Emit(map[string]any{"event": "closed", "plugin": h.Name})
			}
			if exitOnClose {
				os.Exit(ExitOK)
			}
			close(closed)
		})
	}, closed
}

// AwaitEnd waits for SIGINT/SIGTERM (then calls stop) or for closed (then
// for a signal), and exits with ExitOK.
func AwaitEnd(closed <-chan struct{}, stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sigs:
		stop()
	case <-closed:
		<-sigs
	}
	os.Exit(ExitOK)
}
