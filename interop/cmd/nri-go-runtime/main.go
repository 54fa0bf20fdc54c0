// Command nri-go-runtime is a scriptable NRI runtime built on the reference
// Go adaptation (github.com/containerd/nri v0.12.5, pkg/adaptation).
//
// It reads JSON commands from stdin, one per line, and writes one JSON result
// line per command to stdout. Asynchronous happenings (plugin synchronization,
// unsolicited UpdateContainers from plugins, plugin count changes, deprecation
// warnings) are written as lines carrying an "async" key. Logs go to stderr.
// See interop/README.md for the schema.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	validator "github.com/containerd/nri/plugins/default-validator"

	"github.com/nri-rs/interop/peer"
)

const nriVersion = "v0.12.5"

type options struct {
	socket       string
	pluginDir    string
	configDir    string
	regTimeout   time.Duration
	reqTimeout   time.Duration
	name         string
	version      string
	updatePolicy string
	logLevel     string
	noListen     bool
	// validator is the built-in default validator's configuration
	// (--default-validator), nil when not asked for.
	validator *validator.DefaultValidatorConfig
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.socket, "socket", "", "socket path for external plugins (required unless --no-listen)")
	flag.StringVar(&o.pluginDir, "plugin-dir", "/nonexistent/nri-go-runtime/plugins", "directory of pre-installed plugins to launch (may not exist)")
	flag.StringVar(&o.configDir, "config-dir", "/nonexistent/nri-go-runtime/conf.d", "drop-in config directory for launched plugins (may not exist)")
	flag.DurationVar(&o.regTimeout, "registration-timeout", adaptation.DefaultPluginRegistrationTimeout, "plugin registration timeout")
	flag.DurationVar(&o.reqTimeout, "request-timeout", adaptation.DefaultPluginRequestTimeout, "plugin request timeout")
	flag.StringVar(&o.name, "name", "nri-go-runtime", "runtime name sent in Configure")
	flag.StringVar(&o.version, "version", nriVersion, "runtime version sent in Configure")
	flag.StringVar(&o.updatePolicy, "update-policy", "succeed", "answer to unsolicited UpdateContainers: succeed | fail | error")
	flag.StringVar(&o.logLevel, "log-level", "warn", "stderr log level: debug | info | warn | error")
	flag.BoolVar(&o.noListen, "no-listen", false, "do not accept external plugin connections")
	defaultValidator := flag.String("default-validator", "", "register the adaptation's built-in default validator with this configuration: JSON with the Go field names of DefaultValidatorConfig (e.g. {\"Enable\":true,\"RejectOCIHookAdjustment\":true})")
	flag.Parse()
	if *defaultValidator != "" {
		o.validator = &validator.DefaultValidatorConfig{}
		if err := json.Unmarshal([]byte(*defaultValidator), o.validator); err != nil {
			peer.Usage("invalid --default-validator: %v", err)
		}
	}
	if flag.NArg() != 0 {
		peer.Usage("unexpected arguments: %v", flag.Args())
	}
	if o.socket == "" && !o.noListen {
		peer.Usage("--socket is required (or --no-listen)")
	}
	if !validPolicy(o.updatePolicy) {
		peer.Usage("invalid --update-policy %q", o.updatePolicy)
	}
	if err := peer.SetupLogging(o.logLevel); err != nil {
		peer.Usage("%v", err)
	}
	return o
}

func validPolicy(p string) bool { return p == "succeed" || p == "fail" || p == "error" }

func main() {
	o := parseFlags()
	out := peer.NewOut(os.Stdout)
	rt := &runtime{
		out:     out,
		pods:    map[string]*api.PodSandbox{},
		ctrs:    map[string]*api.Container{},
		policy:  o.updatePolicy,
		cntChng: make(chan struct{}),
	}

	adaptation.SetPluginRegistrationTimeout(o.regTimeout)
	adaptation.SetPluginRequestTimeout(o.reqTimeout)

	opts := []adaptation.Option{
		adaptation.WithPluginPath(o.pluginDir),
		adaptation.WithPluginConfigPath(o.configDir),
		adaptation.WithMetrics(&metrics{rt: rt}),
		adaptation.WithDeprecationRecorder(&deprecations{rt: rt}),
	}
	if o.noListen {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	} else {
		opts = append(opts, adaptation.WithSocketPath(o.socket))
	}
	if o.validator != nil {
		opts = append(opts, adaptation.WithDefaultValidator(o.validator))
	}
	a, err := adaptation.New(o.name, o.version, rt.syncFn, rt.updateFn, opts...)
	if err != nil {
		out.Emit(map[string]any{"async": "error", "error": "adaptation.New: " + err.Error()})
		os.Exit(peer.ExitFailure)
	}
	rt.a = a
	if err := a.Start(); err != nil {
		out.Emit(map[string]any{"async": "error", "error": "adaptation.Start: " + err.Error()})
		os.Exit(peer.ExitFailure)
	}
	out.Emit(map[string]any{"async": "started", "socket": o.socket, "nri_version": nriVersion, "runtime_name": o.name, "runtime_version": o.version})

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		a.Stop()
		out.Emit(map[string]any{"async": "stopped", "reason": s.String()})
		os.Exit(peer.ExitOK)
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
			os.Exit(peer.ExitOK)
		}
	}
	a.Stop()
	reason := "stdin closed"
	if err := sc.Err(); err != nil {
		reason = "stdin error: " + err.Error()
	}
	out.Emit(map[string]any{"async": "stopped", "reason": reason})
	if sc.Err() != nil {
		os.Exit(peer.ExitFailure)
	}
}
