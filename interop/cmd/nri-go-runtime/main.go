// Command nri-go-runtime is a scriptable NRI runtime built on the reference
// Go adaptation (github.com/containerd/nri v0.12.5, pkg/adaptation).
//
// It reads JSON commands from stdin, one per line, and writes one JSON result
// line per command to stdout. Asynchronous happenings (plugin synchronization,
// unsolicited UpdateContainers from plugins, plugin count changes, deprecation
// warnings) are written as lines carrying an "async" key. Logs go to stderr.
// See interop/README.md for the schema. The command loop and the tracked
// state are the shared peer.Runtime; this command is its Driver over the
// v0.12.5 adaptation.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	validator "github.com/containerd/nri/plugins/default-validator"

	"github.com/nri-rs/interop/peer"
)

const nriVersion = "v0.12.5"

// runtime is the shared runtime peer for this NRI version's types.
type runtime = peer.Runtime[*api.PodSandbox, *api.Container, *api.ContainerUpdate]

// driver is the peer.Driver over the v0.12.5 adaptation.
type driver struct {
	rt *runtime
	a  *adaptation.Adaptation
}

// parseFlags parses the common runtime flags and --default-validator: the
// built-in default validator's configuration, nil when not asked for.
func parseFlags() (peer.RuntimeFlags, *validator.DefaultValidatorConfig) {
	var cfg *validator.DefaultValidatorConfig
	defaultValidator := flag.String("default-validator", "", "register the adaptation's built-in default validator with this configuration: JSON with the Go field names of DefaultValidatorConfig (e.g. {\"Enable\":true,\"RejectOCIHookAdjustment\":true})")
	o := peer.ParseRuntimeFlags("nri-go-runtime", nriVersion,
		adaptation.DefaultPluginRegistrationTimeout, adaptation.DefaultPluginRequestTimeout, func() {
			if *defaultValidator != "" {
				cfg = &validator.DefaultValidatorConfig{}
				if err := json.Unmarshal([]byte(*defaultValidator), cfg); err != nil {
					peer.Usage("invalid --default-validator: %v", err)
				}
			}
		})
	return o, cfg
}

func main() {
	o, validatorCfg := parseFlags()
	out := peer.NewOut(os.Stdout)
	rt := peer.NewRuntime[*api.PodSandbox, *api.Container, *api.ContainerUpdate](out, o.UpdatePolicy)

	adaptation.SetPluginRegistrationTimeout(o.RegTimeout)
	adaptation.SetPluginRequestTimeout(o.ReqTimeout)

	opts := []adaptation.Option{
		adaptation.WithPluginPath(o.PluginDir),
		adaptation.WithPluginConfigPath(o.ConfigDir),
		adaptation.WithMetrics(&metrics{rt: rt}),
		adaptation.WithDeprecationRecorder(&deprecations{rt: rt}),
	}
	if o.NoListen {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	} else {
		opts = append(opts, adaptation.WithSocketPath(o.Socket))
	}
	if validatorCfg != nil {
		opts = append(opts, adaptation.WithDefaultValidator(validatorCfg))
	}
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error { return rt.Sync(ctx, cb) }
	a, err := adaptation.New(o.Name, o.Version, syncFn, rt.Update, opts...)
	if err != nil {
		peer.Fatal(out, "adaptation.New: "+err.Error())
	}
	if err := a.Start(); err != nil {
		peer.Fatal(out, "adaptation.Start: "+err.Error())
	}
	rt.Serve(&driver{rt: rt, a: a}, o, nriVersion)
}

// metrics implements adaptation.Metrics; only the plugin count is used.
type metrics struct{ rt *runtime }

func (m *metrics) RecordPluginInvocation(string, string, error)      {}
func (m *metrics) RecordPluginLatency(string, string, time.Duration) {}
func (m *metrics) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {
}
func (m *metrics) UpdatePluginCount(n int) { m.rt.SetCount(n) }

// deprecations reports StateChange fallbacks.
type deprecations struct{ rt *runtime }

func (d *deprecations) PluginWarning(_ context.Context, dep adaptation.Deprecation, plugin, details string) {
	d.rt.Out.Emit(map[string]any{"async": "deprecation", "deprecation": dep.String(), "plugin": plugin, "details": details})
}

func (d *driver) BlockPluginSync() func() { return d.a.BlockPluginSync().Unblock }

func (d *driver) Stop() { d.a.Stop() }
