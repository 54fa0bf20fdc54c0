// Command nri-go-bench is the Go side of the side-by-side NRI benchmark: a
// runtime built on the reference adaptation (v0.12.5) with a temp socket, K
// external plugin processes (nri-go-plugin --bench), and timed
// CreateContainer or StartContainer calls. It prints one JSON object on stdout.
//
// With --wasm FILE the K plugins are WebAssembly instead: K copies of FILE
// (10-bench, 11-bench, ...) in the adaptation's plugin directory, loaded by
// its wazero host in Start, with "bench=noop" as their drop-in configuration
// (the interop wasm-guest then answers every CreateContainer with no
// adjustment); startup_ms is then Start's load, Configure and Synchronize
// of the K modules.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"

	"github.com/nri-rs/interop/peer"
)

const nriVersion = "v0.12.5"

type options struct {
	pluginBin    string
	wasm         string
	k, n, warmup int
	// adjustingPlugins: the adjustments to expect; -1 means k.
	adjustingPlugins int
	concurrency      int
	pace             time.Duration
	flavour          string
	event            string
	mode             string
	syncPods         int
	syncPerPod       int
	idleWait         time.Duration
	regWait          time.Duration
	logLevel         string
	pluginLogLevel   string
}

type bench struct {
	o       options
	a       *adaptation.Adaptation
	cntMu   sync.Mutex
	count   int
	cntChng chan struct{}

	pods []*api.PodSandbox
	ctrs []*api.Container

	syncMu  sync.Mutex
	syncDur []time.Duration
}

type metrics struct{ b *bench }

func (m *metrics) RecordPluginInvocation(string, string, error)      {}
func (m *metrics) RecordPluginLatency(string, string, time.Duration) {}
func (m *metrics) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {
}
func (m *metrics) UpdatePluginCount(n int) {
	m.b.cntMu.Lock()
	if n != m.b.count {
		m.b.count = n
		close(m.b.cntChng)
		m.b.cntChng = make(chan struct{})
	}
	m.b.cntMu.Unlock()
}

func (b *bench) waitCount(k int, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		b.cntMu.Lock()
		cur, ch := b.count, b.cntChng
		b.cntMu.Unlock()
		if cur >= k {
			return nil
		}
		select {
		case <-ch:
		case <-deadline:
			return fmt.Errorf("only %d of %d plugins registered+synchronized after %v", cur, k, timeout)
		}
	}
}

func (b *bench) syncFn(ctx context.Context, cb adaptation.SyncCB) error {
	start := time.Now()
	_, err := cb(ctx, b.pods, b.ctrs)
	d := time.Since(start)
	b.syncMu.Lock()
	b.syncDur = append(b.syncDur, d)
	b.syncMu.Unlock()
	return err
}

func (b *bench) updateFn(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

// Result is the JSON output.
type Result struct {
	Impl        string `json:"impl"`
	NRIVersion  string `json:"nri_version"`
	GoVersion   string `json:"go_version"`
	GOMAXPROCS  int    `json:"gomaxprocs"`
	Mode        string `json:"mode"`
	Event       string `json:"event,omitempty"`
	Flavour     string `json:"flavour"`
	K           int    `json:"k"`
	N           int    `json:"n,omitempty"`
	Warmup      int    `json:"warmup,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`

	StartupMS float64 `json:"startup_ms"`

	LatencyUS             *Stats   `json:"latency_us,omitempty"`
	EventsPerSec          float64  `json:"events_per_sec,omitempty"`
	WallMS                float64  `json:"wall_ms,omitempty"`
	RuntimeCPUUSPerEvent  float64  `json:"runtime_cpu_us_per_event,omitempty"`
	PluginsCPUUSPerEvent  float64  `json:"plugins_cpu_us_per_event,omitempty"`
	CallErrors            int      `json:"call_errors"`
	AdjustCheck           string   `json:"adjust_check,omitempty"`
	Sync                  *SyncRes `json:"sync,omitempty"`
	RSS                   RSS      `json:"rss"`
	PluginsExitedThemself int      `json:"plugins_exited_by_themselves"`
	PluginsTerminated     int      `json:"plugins_terminated"`
	PluginsKilled         int      `json:"plugins_killed"`
	Error                 string   `json:"error,omitempty"`
}

// Stats are latency statistics in microseconds.
type Stats struct {
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
	P999   float64 `json:"p999"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
}

// SyncRes describes sync mode.
type SyncRes struct {
	Pods              int       `json:"pods"`
	Containers        int       `json:"containers"`
	ProtoBytes        int       `json:"proto_bytes"`
	SyncCallbackMS    []float64 `json:"sync_callback_ms"`
	RegisteredSyncedM float64   `json:"registered_synced_ms"`
}

// RSS holds memory snapshots (KiB).
type RSS struct {
	RuntimeIdle  peer.Mem   `json:"runtime_idle"`
	RuntimeAfter *peer.Mem  `json:"runtime_after,omitempty"`
	PluginsIdle  []peer.Mem `json:"plugins_idle"`
	PluginsAfter []peer.Mem `json:"plugins_after,omitempty"`
}

func parseFlags() options {
	var o options
	self, _ := os.Executable()
	flag.StringVar(&o.pluginBin, "plugin-bin", filepath.Join(filepath.Dir(self), "nri-go-plugin"), "plugin binary, run as: BIN --bench --socket S --name bench --idx NN --adjust FLAVOUR")
	flag.StringVar(&o.wasm, "wasm", "", "WebAssembly plugin: K copies of it in the plugin directory instead of K plugin processes")
	flag.IntVar(&o.k, "k", 1, "number of plugin processes (indices 10, 11, ...)")
	flag.IntVar(&o.adjustingPlugins, "adjusting-plugins", -1, "plugins whose adjustments the merged reply must carry when adjusting (default: the -k value; a proxy in place of the plugins answers for the plugins behind it)")
	flag.IntVar(&o.n, "n", 20000, "timed calls (latency mode)")
	flag.IntVar(&o.warmup, "warmup", 1000, "warm-up calls (latency mode)")
	flag.IntVar(&o.concurrency, "concurrency", 1, "concurrent callers, each on distinct containers (latency mode)")
	flag.DurationVar(&o.pace, "pace", 0, "start one timed call every this long instead of back to back (latency mode, concurrency 1)")
	flag.StringVar(&o.flavour, "flavour", "noop", "plugin flavour: noop | adjusting")
	flag.StringVar(&o.event, "event", "CreateContainer", "timed event: CreateContainer | StartContainer")
	flag.StringVar(&o.mode, "mode", "latency", "latency | sync | idle")
	flag.IntVar(&o.syncPods, "sync-pods", 1000, "pods in the sync state (sync mode)")
	flag.IntVar(&o.syncPerPod, "sync-containers-per-pod", 5, "containers per pod in the sync state (sync mode)")
	flag.DurationVar(&o.idleWait, "idle-wait", 500*time.Millisecond, "wait after registration before reading idle RSS")
	flag.DurationVar(&o.regWait, "registration-wait", 60*time.Second, "give up if plugins are not all registered+synced by then")
	flag.StringVar(&o.logLevel, "log-level", "warn", "stderr log level of the runtime")
	flag.StringVar(&o.pluginLogLevel, "plugin-log-level", "warn", "--log-level passed to plugins")
	flag.Parse()
	if flag.NArg() != 0 {
		peer.Usage("unexpected arguments: %v", flag.Args())
	}
	if err := peer.SetupLogging(o.logLevel); err != nil {
		peer.Usage("%v", err)
	}
	switch o.flavour {
	case "noop", "none":
		o.flavour = "noop"
	case "adjusting":
	default:
		peer.Usage("invalid --flavour %q", o.flavour)
	}
	switch peer.Canon(o.event) {
	case "CreateContainer", "StartContainer":
		o.event = peer.Canon(o.event)
	default:
		peer.Usage("invalid --event %q", o.event)
	}
	if o.mode != "latency" && o.mode != "sync" && o.mode != "idle" {
		peer.Usage("invalid --mode %q", o.mode)
	}
	if o.wasm != "" && o.flavour != "noop" {
		peer.Usage("--wasm supports only --flavour noop")
	}
	if o.k < 0 || o.n < 1 || o.warmup < 0 || o.concurrency < 1 {
		peer.Usage("invalid --k/--n/--warmup/--concurrency")
	}
	return o
}

func main() {
	o := parseFlags()
	out := peer.NewOut(os.Stdout)
	res := &Result{
		Impl: "go", NRIVersion: nriVersion, GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Mode: o.mode, Flavour: o.flavour, K: o.k,
	}
	err := run(o, res)
	if err != nil {
		res.Error = err.Error()
	}
	out.Emit(res)
	if err != nil {
		os.Exit(peer.ExitFailure)
	}
}

func run(o options, res *Result) error {
	dir, err := os.MkdirTemp("", "nri-go-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "nri.sock")

	b := &bench{o: o, cntChng: make(chan struct{})}
	if o.mode == "sync" {
		b.pods, b.ctrs = peer.State[api.PodSandbox, api.Container](o.syncPods, o.syncPerPod)
		size := 0
		for _, p := range b.pods {
			size += proto.Size(p)
		}
		for _, c := range b.ctrs {
			size += proto.Size(c)
		}
		res.Sync = &SyncRes{Pods: len(b.pods), Containers: len(b.ctrs), ProtoBytes: size}
	}

	pluginDir, confDir := filepath.Join(dir, "no-plugins"), filepath.Join(dir, "no-conf.d")
	if o.wasm != "" {
		pluginDir, confDir = filepath.Join(dir, "plugins"), filepath.Join(dir, "conf.d")
		if err := installWasm(o.wasm, o.k, pluginDir, confDir); err != nil {
			return err
		}
	}
	a, err := adaptation.New("nri-go-bench", nriVersion, b.syncFn, b.updateFn,
		adaptation.WithSocketPath(sock),
		adaptation.WithPluginPath(pluginDir),
		adaptation.WithPluginConfigPath(confDir),
		adaptation.WithMetrics(&metrics{b: b}),
	)
	if err != nil {
		return err
	}
	b.a = a
	tStart := time.Now()
	if err := a.Start(); err != nil {
		return err
	}
	if o.wasm != "" {
		defer a.Stop()
		return b.measure(res, tStart, nil)
	}
	b.syncMu.Lock()
	b.syncDur = nil // Start() synchronizes zero pre-installed plugins
	b.syncMu.Unlock()

	// Launch K plugins.
	var cmds []*exec.Cmd
	stopped := false
	stopAll := func() {
		if stopped {
			return
		}
		stopped = true
		a.Stop()
		res.PluginsExitedThemself, res.PluginsTerminated, res.PluginsKilled = reap(cmds)
	}
	defer stopAll()

	t0 := time.Now()
	if err := launch(o, sock, &cmds); err != nil {
		return err
	}
	return b.measure(res, t0, cmds)
}

// launch starts the K plugin processes.
func launch(o options, sock string, cmds *[]*exec.Cmd) error {
	for i := 0; i < o.k; i++ {
		c := exec.Command(o.pluginBin, "--bench", "--socket", sock, "--name", "bench",
			"--idx", fmt.Sprintf("%02d", 10+i), "--adjust", o.flavour, "--log-level", o.pluginLogLevel)
		c.Stdout = nil
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			return fmt.Errorf("launching plugin: %w", err)
		}
		*cmds = append(*cmds, c)
	}
	return nil
}

// installWasm puts k copies of the module at path into pluginDir (10-bench,
// 11-bench, ...) and their drop-in configuration into confDir.
func installWasm(path string, k int, pluginDir, confDir string) error {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, d := range []string{pluginDir, confDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for i := 0; i < k; i++ {
		if err := os.WriteFile(filepath.Join(pluginDir, fmt.Sprintf("%02d-bench", 10+i)), wasm, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(confDir, "bench.conf"), []byte("bench=noop\n"), 0o644)
}

// measure waits for the K plugins (started at t0), reads the idle RSS and
// runs the mode's work.
func (b *bench) measure(res *Result, t0 time.Time, cmds []*exec.Cmd) error {
	o := b.o
	if err := b.waitCount(o.k, o.regWait); err != nil {
		return err
	}
	res.StartupMS = ms(time.Since(t0))
	if res.Sync != nil {
		res.Sync.RegisteredSyncedM = res.StartupMS
		b.syncMu.Lock()
		for _, d := range b.syncDur {
			res.Sync.SyncCallbackMS = append(res.Sync.SyncCallbackMS, ms(d))
		}
		b.syncMu.Unlock()
	}

	time.Sleep(o.idleWait)
	res.RSS.RuntimeIdle, _ = peer.ReadMem(0)
	res.RSS.PluginsIdle = pluginMem(cmds)

	if o.mode != "latency" {
		return nil
	}
	res.Event, res.N, res.Warmup, res.Concurrency = o.event, o.n, o.warmup, o.concurrency
	return b.latency(res, cmds)
}

func (b *bench) latency(res *Result, cmds []*exec.Cmd) error {
	o := b.o
	pod := peer.Pod[api.PodSandbox](0)
	tmpl := peer.Container[api.Container](0, 0, 0)
	var seq atomic.Uint64
	ctx := context.Background()

	startReq := &api.StartContainerRequest{Pod: pod, Container: tmpl}
	newCreate := func() *api.CreateContainerRequest {
		c := proto.Clone(tmpl).(*api.Container)
		c.Id = peer.HexID("bench-ctr", seq.Add(1))
		return &api.CreateContainerRequest{Pod: pod, Container: c}
	}
	var errCount atomic.Int64
	call := func() time.Duration {
		if o.event == "StartContainer" {
			t := time.Now()
			err := b.a.StartContainer(ctx, startReq)
			d := time.Since(t)
			if err != nil {
				errCount.Add(1)
			}
			return d
		}
		req := newCreate() // cloned outside the timed region
		t := time.Now()
		_, err := b.a.CreateContainer(ctx, req)
		d := time.Since(t)
		if err != nil {
			errCount.Add(1)
		}
		return d
	}

	// Check the merged reply once: K env vars and K annotations when adjusting.
	if o.event == "CreateContainer" {
		rsp, err := b.a.CreateContainer(ctx, newCreate())
		switch {
		case err != nil:
			res.AdjustCheck = "error: " + err.Error()
		default:
			envs, anns := 0, 0
			for _, e := range rsp.GetAdjust().GetEnv() {
				if strings.HasPrefix(e.Key, "BENCH_PLUGIN_") {
					envs++
				}
			}
			for k := range rsp.GetAdjust().GetAnnotations() {
				if strings.HasPrefix(k, "bench.example.com/plugin-") {
					anns++
				}
			}
			want := 0
			if o.flavour == "adjusting" {
				want = o.k
				if o.adjustingPlugins >= 0 {
					want = o.adjustingPlugins
				}
			}
			if envs == want && anns == want {
				res.AdjustCheck = fmt.Sprintf("ok: %d env, %d annotations", envs, anns)
			} else {
				res.AdjustCheck = fmt.Sprintf("mismatch: %d env, %d annotations, want %d", envs, anns, want)
			}
		}
	}

	for i := 0; i < o.warmup; i++ {
		call()
	}
	errCount.Store(0)

	pluginsCPU := func() time.Duration {
		var t time.Duration
		for _, c := range cmds {
			v, _ := peer.ReadTreeCPU(c.Process.Pid)
			t += v
		}
		return t
	}
	cpu0, plugins0 := peer.SelfCPU(), pluginsCPU()
	lats := make([]time.Duration, 0, o.n)
	t0 := time.Now()
	if o.concurrency == 1 {
		for i := 0; i < o.n; i++ {
			if o.pace > 0 {
				time.Sleep(time.Until(t0.Add(time.Duration(i) * o.pace)))
			}
			lats = append(lats, call())
		}
	} else {
		var wg sync.WaitGroup
		var mu sync.Mutex
		per := o.n / o.concurrency
		for g := 0; g < o.concurrency; g++ {
			cnt := per
			if g == 0 {
				cnt += o.n - per*o.concurrency
			}
			wg.Add(1)
			go func(cnt int) {
				defer wg.Done()
				local := make([]time.Duration, 0, cnt)
				for i := 0; i < cnt; i++ {
					local = append(local, call())
				}
				mu.Lock()
				lats = append(lats, local...)
				mu.Unlock()
			}(cnt)
		}
		wg.Wait()
	}
	wall := time.Since(t0)
	cpu1, plugins1 := peer.SelfCPU(), pluginsCPU()

	res.LatencyUS = stats(lats)
	res.WallMS = ms(wall)
	res.EventsPerSec = round(float64(o.n) / wall.Seconds())
	res.RuntimeCPUUSPerEvent = round(float64((cpu1 - cpu0).Microseconds()) / float64(o.n))
	res.PluginsCPUUSPerEvent = round(float64((plugins1 - plugins0).Microseconds()) / float64(o.n))
	res.CallErrors = int(errCount.Load())

	after, _ := peer.ReadMem(0)
	res.RSS.RuntimeAfter = &after
	res.RSS.PluginsAfter = pluginMem(cmds)
	if res.CallErrors > 0 {
		return fmt.Errorf("%d calls failed", res.CallErrors)
	}
	if strings.HasPrefix(res.AdjustCheck, "mismatch") || strings.HasPrefix(res.AdjustCheck, "error") {
		return fmt.Errorf("adjustment check failed: %s", res.AdjustCheck)
	}
	return nil
}

func pluginMem(cmds []*exec.Cmd) []peer.Mem {
	out := make([]peer.Mem, 0, len(cmds))
	for _, c := range cmds {
		m, _ := peer.ReadMem(c.Process.Pid)
		out = append(out, m)
	}
	return out
}

// reap collects the plugin processes after Adaptation.Stop(). Stop() in
// v0.12.5 does not close connections of external plugins, so they normally
// do not exit by themselves: after a short grace period each remaining one
// gets SIGTERM (nri-go-plugin stops its stub and exits), and after 3 s more
// SIGKILL, always by PID.
func reap(cmds []*exec.Cmd) (exited, terminated, killed int) {
	done := make(chan int, len(cmds))
	for i, c := range cmds {
		go func(i int, c *exec.Cmd) { _ = c.Wait(); done <- i }(i, c)
	}
	left := map[int]bool{}
	for i := range cmds {
		left[i] = true
	}
	wait := func(d time.Duration) int {
		n := 0
		deadline := time.After(d)
		for len(left) > 0 {
			select {
			case i := <-done:
				delete(left, i)
				n++
			case <-deadline:
				return n
			}
		}
		return n
	}
	exited = wait(300 * time.Millisecond)
	for i := range left {
		_ = cmds[i].Process.Signal(syscall.SIGTERM)
	}
	terminated = wait(3 * time.Second)
	killed = len(left)
	for i := range left {
		_ = cmds[i].Process.Signal(syscall.SIGKILL)
	}
	for range left {
		<-done
	}
	return exited, terminated, killed
}

func stats(l []time.Duration) *Stats {
	if len(l) == 0 {
		return nil
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	us := func(d time.Duration) float64 { return round(float64(d.Nanoseconds()) / 1e3) }
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(l)))) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(l) {
			i = len(l) - 1
		}
		return us(l[i])
	}
	var sum time.Duration
	for _, d := range l {
		sum += d
	}
	return &Stats{
		Median: q(0.5), P90: q(0.9), P99: q(0.99), P999: q(0.999),
		Min: us(l[0]), Max: us(l[len(l)-1]), Mean: us(sum / time.Duration(len(l))),
	}
}

func ms(d time.Duration) float64 { return round(float64(d.Nanoseconds()) / 1e6) }

func round(f float64) float64 { return math.Round(f*10) / 10 }
