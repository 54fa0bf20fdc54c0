// Package wire holds helpers shared by the nri-rs interop wire programs:
// the hand-registered test service nri.interop.v1.Echo, the payload pattern
// both sides can regenerate, socket setup, JSON-line output and latency
// statistics.
package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ServiceName is the fully-qualified ttRPC service name of the test service.
const ServiceName = "nri.interop.v1.Echo"

// Method names of the test service.
const (
	MethodEcho  = "Echo"
	MethodSleep = "Sleep"
	MethodFail  = "Fail"
)

// FailMessage is the status message returned by Fail.
const FailMessage = "requested failure"

// Pattern returns the test payload of the given size for caller k:
// byte i is (i + 17*k) mod 251. The prime modulus makes shifted or
// spliced data visible; k keeps concurrent callers' payloads distinct.
func Pattern(size, k int) []byte {
	b := make([]byte, size)
	off := (17 * k) % 251
	for i := range b {
		b[i] = byte((i + off) % 251)
	}
	return b
}

// Counters counts requests served by the Echo service.
type Counters struct {
	Echo  atomic.Int64
	Sleep atomic.Int64
	Fail  atomic.Int64
}

// Total is the number of requests served.
func (c *Counters) Total() int64 {
	return c.Echo.Load() + c.Sleep.Load() + c.Fail.Load()
}

// NewEchoServer creates a ttRPC server with the test service registered.
func NewEchoServer() (*ttrpc.Server, *Counters, error) {
	srv, err := ttrpc.NewServer()
	if err != nil {
		return nil, nil, err
	}
	cnt := &Counters{}
	srv.RegisterService(ServiceName, &ttrpc.ServiceDesc{
		Methods: map[string]ttrpc.Method{
			MethodEcho: func(_ context.Context, unmarshal func(interface{}) error) (interface{}, error) {
				in := &wrapperspb.BytesValue{}
				if err := unmarshal(in); err != nil {
					return nil, err
				}
				cnt.Echo.Add(1)
				return in, nil
			},
			MethodSleep: func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
				in := &wrapperspb.UInt64Value{}
				if err := unmarshal(in); err != nil {
					return nil, err
				}
				cnt.Sleep.Add(1)
				t := time.NewTimer(time.Duration(in.GetValue()) * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
					return &emptypb.Empty{}, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			},
			MethodFail: func(_ context.Context, unmarshal func(interface{}) error) (interface{}, error) {
				in := &wrapperspb.Int32Value{}
				if err := unmarshal(in); err != nil {
					return nil, err
				}
				cnt.Fail.Add(1)
				if in.GetValue() == 0 {
					// Code 0 is OK: there is no error to return.
					return &emptypb.Empty{}, nil
				}
				return nil, status.Error(codes.Code(in.GetValue()), FailMessage)
			},
		},
	})
	return srv, cnt, nil
}

// ErrCode is the gRPC code of a call error as the caller sees it: the status
// code if the error carries one, else 4/1 for context deadline/cancel, else
// Unknown (2). A nil error is OK (0).
func ErrCode(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unknown
}

// ErrMessage is the status message of err (or its text).
func ErrMessage(err error) string {
	if err == nil {
		return ""
	}
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// Dial connects to a unix stream socket.
func Dial(path string, timeout time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Listen creates a unix listener on path, removing a stale socket file first.
func Listen(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// AcceptOne accepts one connection, then closes the listener and removes
// the socket file.
func AcceptOne(l net.Listener) (net.Conn, error) {
	c, err := l.Accept()
	l.Close()
	return c, err
}

// Out writes JSON lines to stdout, one object per line, safely from many
// goroutines.
type Out struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// NewOut returns a JSON-line writer on stdout.
func NewOut() *Out {
	return &Out{enc: json.NewEncoder(os.Stdout)}
}

// Line writes v as one JSON line.
func (o *Out) Line(v interface{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.enc.Encode(v); err != nil {
		fmt.Fprintf(os.Stderr, "failed to write JSON line: %v\n", err)
	}
}

// Logf writes a log line to stderr.
func Logf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000000")+" "+format+"\n", args...)
}

// ParseSizes parses a comma-separated list of non-negative sizes.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("invalid size %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// LatencyStats is the JSON summary of one benchmark run.
type LatencyStats struct {
	Event    string `json:"event"` // always "stats"
	Mode     string `json:"mode"`
	Size     int    `json:"size"`
	N        int    `json:"n"`
	MedianNs int64  `json:"median_ns"`
	P90Ns    int64  `json:"p90_ns"`
	P99Ns    int64  `json:"p99_ns"`
	MinNs    int64  `json:"min_ns"`
	MaxNs    int64  `json:"max_ns"`
	MeanNs   int64  `json:"mean_ns"`
	TotalNs  int64  `json:"total_ns"`
}

// Summarize computes statistics over the samples (which it sorts).
// Percentiles use the nearest-rank method.
func Summarize(mode string, size int, samples []time.Duration, total time.Duration) LatencyStats {
	s := LatencyStats{Event: "stats", Mode: mode, Size: size, N: len(samples), TotalNs: total.Nanoseconds()}
	if len(samples) == 0 {
		return s
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	rank := func(p float64) int64 {
		i := int(p*float64(len(samples))+0.999999999) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(samples) {
			i = len(samples) - 1
		}
		return samples[i].Nanoseconds()
	}
	var sum int64
	for _, d := range samples {
		sum += d.Nanoseconds()
	}
	s.MedianNs = rank(0.5)
	s.P90Ns = rank(0.9)
	s.P99Ns = rank(0.99)
	s.MinNs = samples[0].Nanoseconds()
	s.MaxNs = samples[len(samples)-1].Nanoseconds()
	s.MeanNs = sum / int64(len(samples))
	return s
}
