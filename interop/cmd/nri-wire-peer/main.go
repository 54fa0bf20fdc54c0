// Command nri-wire-peer is a Go interop peer for the nri-rs ttRPC and
// multiplexer implementation. It speaks ttRPC (github.com/containerd/ttrpc)
// over the NRI multiplexer (github.com/containerd/nri/pkg/net/multiplex) and
// serves/calls the test service nri.interop.v1.Echo. It also has benchmark
// modes (ttRPC+mux echo and a raw unix-socket ping-pong).
//
// See interop/README.md for the CLI and the output format.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/net/multiplex"
	"github.com/nri-rs/interop/internal/wire"
)

const usage = `usage: nri-wire-peer MODE [flags]

modes:
  peer          serve and/or call nri.interop.v1.Echo over ttRPC+mux
  bench-server  serve Echo over ttRPC+mux for a benchmark client
  bench-client  time Echo round trips over ttRPC+mux
  raw-server    echo bytes on a plain unix socket
  raw-client    time fixed-size ping-pong on a plain unix socket

Run "nri-wire-peer MODE -h" for the flags of a mode.
`

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // a verification or call failed
	exitUsage  = 2 // bad command line
	exitSetup  = 3 // socket/mux/ttrpc setup failed
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(exitUsage)
	}
	mode, args := os.Args[1], os.Args[2:]
	var code int
	switch mode {
	case "peer":
		code = runPeer(args)
	case "bench-server":
		code = runBenchServer(args)
	case "bench-client":
		code = runBenchClient(args)
	case "raw-server":
		code = runRawServer(args)
	case "raw-client":
		code = runRawClient(args)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n\n%s", mode, usage)
		code = exitUsage
	}
	os.Exit(code)
}

// endpoint is the --connect/--listen pair shared by every mode.
type endpoint struct {
	connect     string
	listen      string
	dialTimeout time.Duration
}

func (e *endpoint) register(fs *flag.FlagSet) {
	fs.StringVar(&e.connect, "connect", "", "dial this unix socket")
	fs.StringVar(&e.listen, "listen", "", "listen on this unix socket and accept one connection")
	fs.DurationVar(&e.dialTimeout, "dial-timeout", 10*time.Second, "keep retrying --connect for this long")
}

func (e *endpoint) validate() error {
	if (e.connect == "") == (e.listen == "") {
		return errors.New("exactly one of --connect or --listen is required")
	}
	return nil
}

// open returns the trunk connection. In listen mode it prints a ready line
// once the socket accepts connections.
func (e *endpoint) open(out *wire.Out, mode string) (net.Conn, error) {
	if e.connect != "" {
		c, err := wire.Dial(e.connect, e.dialTimeout)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", e.connect, err)
		}
		return c, nil
	}
	l, err := wire.Listen(e.listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", e.listen, err)
	}
	out.Line(map[string]interface{}{"event": "listening", "mode": mode, "socket": e.listen})
	c, err := wire.AcceptOne(l)
	if err != nil {
		return nil, fmt.Errorf("accept on %s: %w", e.listen, err)
	}
	return c, nil
}

// sentinelConn is a mux connection id nothing sends on; reading it blocks
// until the mux is closed, which tells us the trunk is gone.
const sentinelConn multiplex.ConnID = 0x7fffffff

// watchClose returns a channel closed when the mux shuts down (trunk EOF or
// error). After the channel is closed, *cause holds the error unless it was
// a plain EOF.
func watchClose(mux multiplex.Mux) (<-chan struct{}, *error, error) {
	c, err := mux.Open(sentinelConn)
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	var cause error
	go func() {
		defer close(done)
		buf := make([]byte, 64*1024)
		for {
			if _, err := c.Read(buf); err != nil {
				if !errors.Is(err, io.EOF) {
					cause = err
				}
				return
			}
		}
	}()
	return done, &cause, nil
}

func parseFlags(fs *flag.FlagSet, args []string) bool {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return false
	}
	return true
}
