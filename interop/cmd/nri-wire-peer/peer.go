package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/net/multiplex"
	"github.com/containerd/ttrpc"
	"github.com/nri-rs/interop/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const defaultSizes = "0,100,4095,4096,4097,1048576,4194000"

// callSpec is one --call step: [SERVICE/]METHOD[:ARG][=CODE].
type callSpec struct {
	raw     string
	service string
	method  string
	arg     uint64
	expect  *int // expected gRPC code, if given
}

type callList []callSpec

func (l *callList) String() string { return fmt.Sprint(len(*l)) }

func (l *callList) Set(v string) error {
	s := callSpec{raw: v, service: wire.ServiceName}
	rest := v
	if i := strings.LastIndex(rest, "="); i >= 0 {
		c, err := strconv.Atoi(rest[i+1:])
		if err != nil {
			return fmt.Errorf("bad expected code in %q", v)
		}
		s.expect = &c
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, ":"); i >= 0 {
		a, err := strconv.ParseUint(rest[i+1:], 10, 64)
		if err != nil {
			return fmt.Errorf("bad argument in %q", v)
		}
		s.arg = a
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "/"); i >= 0 {
		s.service = rest[:i]
		rest = rest[i+1:]
	}
	if rest == "" {
		return fmt.Errorf("missing method in %q", v)
	}
	s.method = rest
	*l = append(*l, s)
	return nil
}

type peerOpts struct {
	ep          endpoint
	serveConn   uint
	callConn    uint
	sizes       string
	concurrency int
	rounds      int
	timeout     time.Duration
	calls       callList
	exitAfter   bool
}

// errorList collects verification errors from many goroutines.
type errorList struct {
	mu   sync.Mutex
	errs []string
}

func (e *errorList) add(format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	wire.Logf("error: %s", msg)
	e.mu.Lock()
	e.errs = append(e.errs, msg)
	e.mu.Unlock()
}

func (e *errorList) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string{}, e.errs...)
}

func runPeer(args []string) int {
	var o peerOpts
	fs := flag.NewFlagSet("peer", flag.ContinueOnError)
	o.ep.register(fs)
	fs.UintVar(&o.serveConn, "serve-conn", 1, "mux conn id on which to serve nri.interop.v1.Echo (0: do not serve)")
	fs.UintVar(&o.callConn, "call-conn", 0, "mux conn id on which to call the other side's Echo service (0: do not call)")
	fs.StringVar(&o.sizes, "sizes", defaultSizes, "comma-separated Echo payload sizes for the call checks (empty: none)")
	fs.IntVar(&o.concurrency, "concurrency", 8, "concurrent callers in the concurrent pass (0: skip it)")
	fs.IntVar(&o.rounds, "rounds", 1, "repeat the sequential+concurrent passes this many times")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline of each call (sent as timeout_nano)")
	fs.Var(&o.calls, "call", "extra call [SERVICE/]METHOD[:ARG][=CODE], repeatable, run in order after the echo checks")
	fs.BoolVar(&o.exitAfter, "exit-after-calls", false, "close the socket and exit after the calls instead of waiting for the other side to close")
	if !parseFlags(fs, args) {
		return exitUsage
	}
	if err := o.ep.validate(); err != nil {
		wire.Logf("%v", err)
		return exitUsage
	}
	sizes, err := wire.ParseSizes(o.sizes)
	if err != nil {
		wire.Logf("%v", err)
		return exitUsage
	}
	if o.serveConn > 0 && o.serveConn == o.callConn {
		wire.Logf("--serve-conn and --call-conn must differ")
		return exitUsage
	}
	if len(o.calls) > 0 && o.callConn == 0 {
		wire.Logf("--call needs --call-conn")
		return exitUsage
	}

	out := wire.NewOut()
	trunk, err := o.ep.open(out, "peer")
	if err != nil {
		wire.Logf("%v", err)
		return exitSetup
	}

	// Block the mux reader until every conn is open and served, so no
	// early frame is dropped.
	mux := multiplex.Multiplex(trunk, multiplex.WithBlockedRead())
	defer mux.Close()
	closed, closeCause, err := watchClose(mux)
	if err != nil {
		wire.Logf("mux: %v", err)
		return exitSetup
	}

	var counters *wire.Counters
	var srv *ttrpc.Server
	serveDone := make(chan error, 1)
	if o.serveConn > 0 {
		l, err := mux.Listen(multiplex.ConnID(o.serveConn))
		if err != nil {
			wire.Logf("mux listen: %v", err)
			return exitSetup
		}
		srv, counters, err = wire.NewEchoServer()
		if err != nil {
			wire.Logf("ttrpc server: %v", err)
			return exitSetup
		}
		go func() { serveDone <- srv.Serve(context.Background(), l) }()
	}

	var client *ttrpc.Client
	if o.callConn > 0 {
		c, err := mux.Open(multiplex.ConnID(o.callConn))
		if err != nil {
			wire.Logf("mux open: %v", err)
			return exitSetup
		}
		client = ttrpc.NewClient(c)
	}
	mux.Unblock()
	out.Line(map[string]interface{}{"event": "ready", "serve_conn": o.serveConn, "call_conn": o.callConn})
	wire.Logf("peer ready (serve conn %d, call conn %d)", o.serveConn, o.callConn)

	errs := &errorList{}
	calls := 0
	if client != nil {
		calls += runEchoChecks(client, sizes, o, errs)
		for _, cs := range o.calls {
			calls++
			runCallSpec(client, cs, o.timeout, out, errs)
		}
		errList := errs.list()
		out.Line(map[string]interface{}{
			"event":  "result",
			"ok":     len(errList) == 0,
			"calls":  calls,
			"errors": errList,
		})
	}

	if o.exitAfter {
		wire.Logf("closing after calls (--exit-after-calls)")
		mux.Close()
	}
	<-closed
	if *closeCause != nil {
		wire.Logf("mux closed: %v", *closeCause)
	} else {
		wire.Logf("mux closed (EOF)")
	}
	if client != nil {
		client.Close()
	}
	if srv != nil {
		srv.Close()
		<-serveDone
	}
	closedLine := map[string]interface{}{"event": "closed"}
	if counters != nil {
		closedLine["served"] = map[string]int64{
			"echo":  counters.Echo.Load(),
			"sleep": counters.Sleep.Load(),
			"fail":  counters.Fail.Load(),
		}
	}
	if *closeCause != nil {
		closedLine["error"] = (*closeCause).Error()
	}
	out.Line(closedLine)
	if len(errs.list()) > 0 {
		return exitFailed
	}
	return exitOK
}

// echoOnce calls Echo with the pattern for (size, k) and verifies the reply.
func echoOnce(client *ttrpc.Client, size, k int, timeout time.Duration, errs *errorList, who string) {
	want := wire.Pattern(size, k)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp := &wrapperspb.BytesValue{}
	err := client.Call(ctx, wire.ServiceName, wire.MethodEcho, &wrapperspb.BytesValue{Value: want}, resp)
	if err != nil {
		errs.add("%s: Echo size %d: code %d: %v", who, size, wire.ErrCode(err), err)
		return
	}
	got := resp.GetValue()
	if !bytes.Equal(got, want) {
		first := -1
		for i := 0; i < len(got) && i < len(want); i++ {
			if got[i] != want[i] {
				first = i
				break
			}
		}
		errs.add("%s: Echo size %d: reply mismatch (got %d bytes, first differing byte %d)", who, size, len(got), first)
	}
}

// runEchoChecks runs the sequential and concurrent Echo passes and returns
// the number of calls made.
func runEchoChecks(client *ttrpc.Client, sizes []int, o peerOpts, errs *errorList) int {
	if len(sizes) == 0 {
		return 0
	}
	calls := 0
	for r := 0; r < o.rounds; r++ {
		for _, size := range sizes {
			echoOnce(client, size, 0, o.timeout, errs, fmt.Sprintf("round %d sequential", r))
			calls++
		}
		if o.concurrency <= 0 {
			continue
		}
		var wg sync.WaitGroup
		for k := 1; k <= o.concurrency; k++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				// Each caller starts at a different size so that
				// large and small messages interleave.
				for i := range sizes {
					size := sizes[(i+k)%len(sizes)]
					echoOnce(client, size, k, o.timeout, errs, fmt.Sprintf("round %d caller %d", r, k))
				}
			}(k)
		}
		wg.Wait()
		calls += o.concurrency * len(sizes)
	}
	return calls
}

// runCallSpec performs one --call step and prints its "call" line.
func runCallSpec(client *ttrpc.Client, cs callSpec, timeout time.Duration, out *wire.Out, errs *errorList) {
	var req, resp interface{}
	switch {
	case cs.service == wire.ServiceName && cs.method == wire.MethodSleep:
		req, resp = &wrapperspb.UInt64Value{Value: cs.arg}, &emptypb.Empty{}
	case cs.service == wire.ServiceName && cs.method == wire.MethodFail:
		req, resp = &wrapperspb.Int32Value{Value: int32(cs.arg)}, &emptypb.Empty{}
	case cs.service == wire.ServiceName && cs.method == wire.MethodEcho:
		req, resp = &wrapperspb.BytesValue{Value: wire.Pattern(int(cs.arg), 0)}, &wrapperspb.BytesValue{}
	default:
		req, resp = &wrapperspb.BytesValue{Value: wire.Pattern(int(cs.arg), 0)}, &emptypb.Empty{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := client.Call(ctx, cs.service, cs.method, req, resp)
	elapsed := time.Since(start)
	code := wire.ErrCode(err)
	line := map[string]interface{}{
		"event":      "call",
		"spec":       cs.raw,
		"service":    cs.service,
		"method":     cs.method,
		"arg":        cs.arg,
		"code":       int(code),
		"code_name":  code.String(),
		"message":    wire.ErrMessage(err),
		"elapsed_ns": elapsed.Nanoseconds(),
	}
	if cs.expect != nil {
		line["expected"] = *cs.expect
	}
	ok := true
	if cs.expect != nil && int(code) != *cs.expect {
		ok = false
		errs.add("call %s: got code %d (%s), expected %d", cs.raw, code, wire.ErrMessage(err), *cs.expect)
	}
	if code == codes.OK && cs.service == wire.ServiceName && cs.method == wire.MethodEcho {
		if !bytes.Equal(resp.(*wrapperspb.BytesValue).GetValue(), req.(*wrapperspb.BytesValue).GetValue()) {
			ok = false
			errs.add("call %s: Echo reply mismatch", cs.raw)
		}
	}
	line["ok"] = ok
	out.Line(line)
}
