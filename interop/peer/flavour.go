package peer

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
)

// Flavour describes the adjustment a test/bench plugin returns from
// CreateContainer. Values are distinct per plugin index where that avoids
// ownership conflicts (env, annotation, mount, device); rlimit and resources
// use fixed values, so two plugins asking for them conflict on purpose.
type Flavour struct {
	Idx  string // plugin index, e.g. "10"
	Name string // full plugin name, e.g. "10-bench" (env/annotation value)

	Env, Annotation, Mount, Device, Rlimit, Resources bool
	RemoveEnv                                         []string
}

// ParseFlavour parses --adjust values: none | noop | adjusting (= env,annotation)
// | env | annotation | mount | device | rlimit | resources | remove-env=KEY.
func ParseFlavour(items []string) (*Flavour, error) {
	f := &Flavour{}
	for _, it := range items {
		k, v, hasV := strings.Cut(strings.TrimSpace(it), "=")
		switch strings.ToLower(k) {
		case "", "none", "noop", "no-op":
		case "adjusting", "env+annotation":
			f.Env, f.Annotation = true, true
		case "env":
			f.Env = true
		case "annotation":
			f.Annotation = true
		case "mount":
			f.Mount = true
		case "device":
			f.Device = true
		case "rlimit":
			f.Rlimit = true
		case "resources":
			f.Resources = true
		case "remove-env":
			if !hasV || v == "" {
				return nil, fmt.Errorf("remove-env needs =KEY")
			}
			f.RemoveEnv = append(f.RemoveEnv, v)
		default:
			return nil, fmt.Errorf("unknown --adjust flavour %q", it)
		}
	}
	return f, nil
}

// Empty reports whether the flavour adjusts nothing.
func (f *Flavour) Empty() bool {
	return !f.Env && !f.Annotation && !f.Mount && !f.Device && !f.Rlimit && !f.Resources && len(f.RemoveEnv) == 0
}

// adjustment is the caller's *api.ContainerAdjustment (the pointer to TA)
// whose AddMount and AddDevice take its *api.Mount (M) and
// *api.LinuxDevice (D): the methods of it that the flavours use, alike in
// every NRI version.
type adjustment[TA any, M, D proto.Message] interface {
	*TA
	RemoveEnv(key string)
	AddEnv(key, value string)
	AddAnnotation(key, value string)
	AddRlimit(typ string, hard, soft uint64)
	SetLinuxMemoryLimit(value int64)
	SetLinuxCPUShares(value uint64)
	AddMount(m M)
	AddDevice(d D)
}

// Adjustment builds flavour f's adjustment as the caller's
// api.ContainerAdjustment (TA), its mount and device as the caller's
// api.Mount (TM) and api.LinuxDevice (TD); nil for the no-op flavour:
//
//   - env:        BENCH_PLUGIN_<idx>=<name>
//   - annotation: bench.example.com/plugin-<idx>=<name>
//   - mount:      bind /tmp/nri-plugin-<idx> -> /mnt/nri-plugin-<idx> (rbind,ro)
//   - device:     /dev/nri-plugin-<idx>, char 1:3
//   - rlimit:     RLIMIT_NOFILE hard 4096 soft 1024
//   - resources:  memory limit 512 MiB, CPU shares 1024
//   - remove-env: "-KEY" removal marker
func Adjustment[TA, TM, TD any, PA adjustment[TA, PM, PD], PM message[TM], PD message[TD]](f *Flavour) PA {
	if f.Empty() {
		return nil
	}
	a := PA(new(TA))
	for _, k := range f.RemoveEnv {
		a.RemoveEnv(k)
	}
	if f.Env {
		a.AddEnv("BENCH_PLUGIN_"+f.Idx, f.Name)
	}
	if f.Annotation {
		a.AddAnnotation("bench.example.com/plugin-"+f.Idx, f.Name)
	}
	if f.Mount {
		a.AddMount(decode[TM, PM](map[string]any{
			"destination": "/mnt/nri-plugin-" + f.Idx, "source": "/tmp/nri-plugin-" + f.Idx,
			"type": "bind", "options": []string{"rbind", "ro"},
		}))
	}
	if f.Device {
		a.AddDevice(decode[TD, PD](map[string]any{
			"path": "/dev/nri-plugin-" + f.Idx, "type": "c", "major": 1, "minor": 3,
		}))
	}
	if f.Rlimit {
		a.AddRlimit("RLIMIT_NOFILE", 4096, 1024)
	}
	if f.Resources {
		a.SetLinuxMemoryLimit(512 << 20)
		a.SetLinuxCPUShares(1024)
	}
	return a
}

// unsolicitedDoc is the update a plugin sends with --unsolicited-update
// (see SendUnsolicited), as a protojson api.ContainerUpdate: CPU shares 512
// and memory limit 1 GiB for container id.
func unsolicitedDoc(id string) map[string]any {
	return map[string]any{
		"container_id": id,
		"linux": map[string]any{
			"resources": map[string]any{
				"cpu":    map[string]any{"shares": map[string]any{"value": 512}},
				"memory": map[string]any{"limit": map[string]any{"value": 1 << 30}},
			},
		},
	}
}
