package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/containerd/nri/pkg/net/multiplex"
	"github.com/containerd/ttrpc"
	"github.com/nri-rs/interop/internal/wire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type benchOpts struct {
	ep      endpoint
	conn    uint
	sizes   string
	n       int
	warmup  int
	timeout time.Duration
}

func (o *benchOpts) registerClient(fs *flag.FlagSet, withConn bool) {
	o.ep.register(fs)
	if withConn {
		fs.UintVar(&o.conn, "conn", uint(multiplex.PluginServiceConn), "mux conn id carrying the Echo service")
		fs.DurationVar(&o.timeout, "timeout", 2*time.Second, "deadline of each call, sent as timeout_nano (0: none)")
	}
	fs.StringVar(&o.sizes, "sizes", "64,2048", "comma-separated payload sizes")
	fs.IntVar(&o.n, "n", 20000, "timed round trips per size")
	fs.IntVar(&o.warmup, "warmup", 2000, "untimed warm-up round trips per size")
}

// runBenchServer serves Echo over ttRPC+mux until the client disconnects.
func runBenchServer(args []string) int {
	var o benchOpts
	fs := flag.NewFlagSet("bench-server", flag.ContinueOnError)
	o.ep.register(fs)
	fs.UintVar(&o.conn, "conn", uint(multiplex.PluginServiceConn), "mux conn id on which to serve Echo")
	if !parseFlags(fs, args) {
		return exitUsage
	}
	if err := o.ep.validate(); err != nil || o.conn == 0 {
		wire.Logf("bad flags: need exactly one of --connect/--listen and --conn > 0")
		return exitUsage
	}
	out := wire.NewOut()
	trunk, err := o.ep.open(out, "bench-server")
	if err != nil {
		wire.Logf("%v", err)
		return exitSetup
	}
	mux := multiplex.Multiplex(trunk, multiplex.WithBlockedRead())
	defer mux.Close()
	closed, cause, err := watchClose(mux)
	if err != nil {
		wire.Logf("mux: %v", err)
		return exitSetup
	}
	l, err := mux.Listen(multiplex.ConnID(o.conn))
	if err != nil {
		wire.Logf("mux listen: %v", err)
		return exitSetup
	}
	srv, counters, err := wire.NewEchoServer()
	if err != nil {
		wire.Logf("ttrpc server: %v", err)
		return exitSetup
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(context.Background(), l) }()
	mux.Unblock()
	<-closed
	srv.Close()
	<-serveDone
	line := map[string]interface{}{"event": "closed", "served": counters.Total()}
	if *cause != nil {
		line["error"] = (*cause).Error()
	}
	out.Line(line)
	return exitOK
}

// runBenchClient times Echo round trips over ttRPC+mux.
func runBenchClient(args []string) int {
	var o benchOpts
	fs := flag.NewFlagSet("bench-client", flag.ContinueOnError)
	o.registerClient(fs, true)
	if !parseFlags(fs, args) {
		return exitUsage
	}
	sizes, err := wire.ParseSizes(o.sizes)
	if err := errors.Join(err, o.ep.validate()); err != nil || o.conn == 0 || o.n <= 0 || o.warmup < 0 {
		wire.Logf("bad flags: %v (need --conn > 0, --n > 0, --warmup >= 0)", err)
		return exitUsage
	}
	out := wire.NewOut()
	trunk, err := o.ep.open(out, "bench-client")
	if err != nil {
		wire.Logf("%v", err)
		return exitSetup
	}
	mux := multiplex.Multiplex(trunk)
	defer mux.Close()
	c, err := mux.Open(multiplex.ConnID(o.conn))
	if err != nil {
		wire.Logf("mux open: %v", err)
		return exitSetup
	}
	client := ttrpc.NewClient(c)
	defer client.Close()

	call := func(req, resp *wrapperspb.BytesValue) error {
		ctx := context.Background()
		if o.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.timeout)
			defer cancel()
		}
		return client.Call(ctx, wire.ServiceName, wire.MethodEcho, req, resp)
	}
	for _, size := range sizes {
		req := &wrapperspb.BytesValue{Value: wire.Pattern(size, 0)}
		resp := &wrapperspb.BytesValue{}
		for i := 0; i < o.warmup; i++ {
			if err := call(req, resp); err != nil {
				wire.Logf("warm-up Echo size %d: %v", size, err)
				return exitFailed
			}
		}
		if !bytes.Equal(resp.GetValue(), req.GetValue()) && o.warmup > 0 {
			wire.Logf("Echo size %d: reply mismatch", size)
			return exitFailed
		}
		samples := make([]time.Duration, o.n)
		begin := time.Now()
		for i := range samples {
			t0 := time.Now()
			if err := call(req, resp); err != nil {
				wire.Logf("Echo size %d: %v", size, err)
				return exitFailed
			}
			samples[i] = time.Since(t0)
		}
		total := time.Since(begin)
		out.Line(wire.Summarize("ttrpc", size, samples, total))
	}
	return exitOK
}

// runRawServer echoes whatever it reads on one plain unix connection.
func runRawServer(args []string) int {
	var o benchOpts
	fs := flag.NewFlagSet("raw-server", flag.ContinueOnError)
	o.ep.register(fs)
	if !parseFlags(fs, args) {
		return exitUsage
	}
	if err := o.ep.validate(); err != nil {
		wire.Logf("%v", err)
		return exitUsage
	}
	out := wire.NewOut()
	conn, err := o.ep.open(out, "raw-server")
	if err != nil {
		wire.Logf("%v", err)
		return exitSetup
	}
	defer conn.Close()
	buf := make([]byte, 1<<20)
	var total int64
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				wire.Logf("write: %v", werr)
				break
			}
			total += int64(n)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				wire.Logf("read: %v", err)
			}
			break
		}
	}
	out.Line(map[string]interface{}{"event": "closed", "echoed_bytes": total})
	return exitOK
}

// runRawClient times fixed-size ping-pongs on a plain unix connection.
func runRawClient(args []string) int {
	var o benchOpts
	fs := flag.NewFlagSet("raw-client", flag.ContinueOnError)
	o.registerClient(fs, false)
	if !parseFlags(fs, args) {
		return exitUsage
	}
	sizes, err := wire.ParseSizes(o.sizes)
	if err := errors.Join(err, o.ep.validate()); err != nil || o.n <= 0 || o.warmup < 0 {
		wire.Logf("bad flags: %v (need --n > 0, --warmup >= 0)", err)
		return exitUsage
	}
	out := wire.NewOut()
	conn, err := o.ep.open(out, "raw-client")
	if err != nil {
		wire.Logf("%v", err)
		return exitSetup
	}
	defer conn.Close()
	for _, size := range sizes {
		if size == 0 {
			wire.Logf("raw mode cannot ping-pong 0 bytes")
			return exitUsage
		}
		sendBuf := wire.Pattern(size, 0)
		recvBuf := make([]byte, size)
		rt := func() error {
			if _, err := conn.Write(sendBuf); err != nil {
				return err
			}
			_, err := io.ReadFull(conn, recvBuf)
			return err
		}
		for i := 0; i < o.warmup; i++ {
			if err := rt(); err != nil {
				wire.Logf("warm-up size %d: %v", size, err)
				return exitFailed
			}
		}
		if o.warmup > 0 && !bytes.Equal(sendBuf, recvBuf) {
			wire.Logf("size %d: echo mismatch", size)
			return exitFailed
		}
		samples := make([]time.Duration, o.n)
		begin := time.Now()
		for i := range samples {
			t0 := time.Now()
			if err := rt(); err != nil {
				wire.Logf("size %d: %v", size, fmt.Errorf("round trip: %w", err))
				return exitFailed
			}
			samples[i] = time.Since(t0)
		}
		out.Line(wire.Summarize("raw", size, samples, time.Since(begin)))
	}
	return exitOK
}
