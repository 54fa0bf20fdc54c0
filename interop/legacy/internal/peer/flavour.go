package peer

import (
	"fmt"
	"strings"

	"github.com/containerd/nri/pkg/api"
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

// Adjustment builds a fresh adjustment, or nil for the no-op flavour.
//
//   - env:        BENCH_PLUGIN_<idx>=<name>
//   - annotation: bench.example.com/plugin-<idx>=<name>
//   - mount:      bind /tmp/nri-plugin-<idx> -> /mnt/nri-plugin-<idx> (rbind,ro)
//   - device:     /dev/nri-plugin-<idx>, char 1:3
//   - rlimit:     RLIMIT_NOFILE hard 4096 soft 1024
//   - resources:  memory limit 512 MiB, CPU shares 1024
//   - remove-env: "-KEY" removal marker
func (f *Flavour) Adjustment() *api.ContainerAdjustment {
	if f.Empty() {
		return nil
	}
	a := &api.ContainerAdjustment{}
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
		a.AddMount(&api.Mount{
			Destination: "/mnt/nri-plugin-" + f.Idx,
			Source:      "/tmp/nri-plugin-" + f.Idx,
			Type:        "bind",
			Options:     []string{"rbind", "ro"},
		})
	}
	if f.Device {
		a.AddDevice(&api.LinuxDevice{Path: "/dev/nri-plugin-" + f.Idx, Type: "c", Major: 1, Minor: 3})
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

// UnsolicitedUpdate is the update a plugin sends with --unsolicited-update:
// CPU shares 512 and memory limit 1 GiB for the given container.
func UnsolicitedUpdate(id string) *api.ContainerUpdate {
	return &api.ContainerUpdate{
		ContainerId: id,
		Linux: &api.LinuxContainerUpdate{
			Resources: &api.LinuxResources{
				Cpu:    &api.LinuxCPU{Shares: api.UInt64(uint64(512))},
				Memory: &api.LinuxMemory{Limit: api.Int64(int64(1 << 30))},
			},
		},
	}
}
