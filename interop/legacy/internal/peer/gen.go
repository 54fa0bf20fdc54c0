package peer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/containerd/nri/pkg/api"
)

// HexID returns a deterministic 64-hex-digit ID derived from (kind, n), shaped
// like a containerd sandbox/container ID.
func HexID(kind string, n uint64) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", kind, n)))
	return hex.EncodeToString(sum[:])
}

// UID returns a deterministic RFC-4122-shaped UID for pod n.
func UID(n uint64) string {
	h := HexID("uid", n)
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

// Pod builds pod number i in the realistic shape of GO-PERF-ANCHOR.md
// ("Request shape"): 10 labels, 10 annotations, runtime handler, cgroup
// parent/path, 3 namespaces, pod resources (memory limit, CPU
// shares/quota/period) and one IP. About 1.4 KB serialized.
func Pod(i int) *api.PodSandbox {
	id := HexID("pod", uint64(i))
	uid := UID(uint64(i))
	name := fmt.Sprintf("bench-app-%d-7d9f8c6b5d-x%04d", i, i%10000)
	ns := "bench-namespace"
	labels := map[string]string{
		"app.kubernetes.io/name":       fmt.Sprintf("bench-app-%d", i),
		"app.kubernetes.io/instance":   fmt.Sprintf("bench-app-%d-prod", i),
		"app.kubernetes.io/version":    "1.27.3",
		"app.kubernetes.io/component":  "backend",
		"app.kubernetes.io/part-of":    "bench-suite",
		"app.kubernetes.io/managed-by": "helm",
		"pod-template-hash":            "7d9f8c6b5d",
		"io.kubernetes.pod.name":       name,
		"io.kubernetes.pod.namespace":  ns,
		"io.kubernetes.pod.uid":        uid,
	}
	annotations := map[string]string{
		"kubernetes.io/config.seen":                      "2026-11-21T22:44:00.123456789Z",
		"kubernetes.io/config.source":                    "api",
		"prometheus.io/scrape":                           "true",
		"prometheus.io/port":                             "9090",
		"prometheus.io/path":                             "/metrics",
		"cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
		"checksum/config":                                HexID("cfg", uint64(i)),
		"deployment.kubernetes.io/revision":              "42",
		"example.com/owner":                              "team-bench@example.com",
		"example.com/cost-center":                        "cc-1234-benchmarks",
	}
	return &api.PodSandbox{
		Id:             id,
		Name:           name,
		Uid:            uid,
		Namespace:      ns,
		Labels:         labels,
		Annotations:    annotations,
		RuntimeHandler: "runc",
		Linux: &api.LinuxPodSandbox{
			CgroupParent: "kubepods-burstable-pod" + uid + ".slice",
			CgroupsPath:  "kubepods-burstable-pod" + uid + ".slice:cri-containerd:" + id,
			Namespaces: []*api.LinuxNamespace{
				{Type: "network", Path: "/var/run/netns/cni-" + uid},
				{Type: "ipc"},
				{Type: "uts"},
			},
			PodResources: &api.LinuxResources{
				Memory: &api.LinuxMemory{Limit: api.Int64(int64(512 << 20))},
				Cpu: &api.LinuxCPU{
					Shares: api.UInt64(uint64(512)),
					Quota:  api.Int64(int64(50000)),
					Period: api.UInt64(uint64(100000)),
				},
			},
		},
		Ips: []string{fmt.Sprintf("10.244.%d.%d", (i/250)%256, i%250+2)},
	}
}

// Container builds container j (globally numbered n) of pod in the shape of
// GO-PERF-ANCHOR.md: 10 labels, 10 annotations, 3 args, 10 env vars, 5
// kubelet-style bind mounts, 5 namespaces, memory limit+swap, CPU
// shares/quota/period/cpus/mems, one unified key, oom_score_adj and a
// systemd-style cgroups path. About 3.0 KB serialized.
func Container(pod *api.PodSandbox, j int, n uint64) *api.Container {
	id := HexID("ctr", n)
	name := fmt.Sprintf("bench-ctr-%d", j)
	podDir := "/var/lib/kubelet/pods/" + pod.Uid
	labels := map[string]string{
		"io.kubernetes.container.name": name,
		"io.kubernetes.pod.name":       pod.Name,
		"io.kubernetes.pod.namespace":  pod.Namespace,
		"io.kubernetes.pod.uid":        pod.Uid,
		"app.kubernetes.io/name":       pod.Labels["app.kubernetes.io/name"],
		"app.kubernetes.io/component":  "backend",
		"app.kubernetes.io/version":    "1.27.3",
		"tier":                         "backend",
		"track":                        "stable",
		"release":                      "bench-release",
	}
	annotations := map[string]string{
		"io.kubernetes.container.hash":                     "5f7b2a9c",
		"io.kubernetes.container.restartCount":             "0",
		"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
		"io.kubernetes.container.terminationMessagePolicy": "File",
		"io.kubernetes.pod.terminationGracePeriod":         "30",
		"io.kubernetes.container.ports":                    `[{"name":"http","containerPort":8080,"protocol":"TCP"}]`,
		"io.kubernetes.cri.container-type":                 "container",
		"io.kubernetes.cri.image-name":                     "registry.example.com/bench/app:1.27.3",
		"io.kubernetes.cri.sandbox-id":                     pod.Id,
		"io.kubernetes.cri.sandbox-name":                   pod.Name,
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + pod.Name,
		"KUBERNETES_SERVICE_HOST=10.96.0.1",
		"KUBERNETES_SERVICE_PORT=443",
		"KUBERNETES_PORT=tcp://10.96.0.1:443",
		"APP_MODE=production",
		"APP_LOG_LEVEL=info",
		"APP_LISTEN_ADDR=0.0.0.0:8080",
		"APP_DB_URL=postgres://bench@db.bench-namespace.svc:5432/bench",
		"GOMAXPROCS=2",
	}
	ns := func(t string) *api.LinuxNamespace { return &api.LinuxNamespace{Type: t} }
	netns := &api.LinuxNamespace{Type: "network", Path: "/var/run/netns/cni-" + pod.Uid}
	return &api.Container{
		Id:           id,
		PodSandboxId: pod.Id,
		Name:         name,
		State:        api.ContainerState_CONTAINER_CREATED,
		Labels:       labels,
		Annotations:  annotations,
		Args:         []string{"/app/server", "--config=/etc/app/config.yaml", "--port=8080"},
		Env:          env,
		Mounts: []*api.Mount{
			{Destination: "/etc/hosts", Type: "bind", Source: podDir + "/etc-hosts", Options: []string{"rbind", "rprivate", "rw"}},
			{Destination: "/dev/termination-log", Type: "bind", Source: podDir + "/containers/" + name + "/5f7b2a9c", Options: []string{"rbind", "rprivate", "rw"}},
			{Destination: "/etc/hostname", Type: "bind", Source: "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/" + pod.Id + "/hostname", Options: []string{"rbind", "rprivate", "rw"}},
			{Destination: "/etc/resolv.conf", Type: "bind", Source: "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/" + pod.Id + "/resolv.conf", Options: []string{"rbind", "rprivate", "rw"}},
			{Destination: "/var/run/secrets/kubernetes.io/serviceaccount", Type: "bind", Source: podDir + "/volumes/kubernetes.io~projected/kube-api-access-x7k2p", Options: []string{"rbind", "rprivate", "ro"}},
		},
		Linux: &api.LinuxContainer{
			Namespaces: []*api.LinuxNamespace{ns("pid"), ns("ipc"), ns("uts"), ns("mount"), netns},
			Resources: &api.LinuxResources{
				Memory: &api.LinuxMemory{
					Limit: api.Int64(int64(256 << 20)),
					Swap:  api.Int64(int64(256 << 20)),
				},
				Cpu: &api.LinuxCPU{
					Shares: api.UInt64(uint64(256)),
					Quota:  api.Int64(int64(25000)),
					Period: api.UInt64(uint64(100000)),
					Cpus:   "0-1",
					Mems:   "0",
				},
				Unified: map[string]string{"memory.oom.group": "1"},
			},
			OomScoreAdj: api.Int(996),
			CgroupsPath: "kubepods-burstable-pod" + pod.Uid + ".slice:cri-containerd:" + id,
		},
	}
}

// State builds pods x perPod containers (containers are RUNNING), in a
// deterministic order: all pods, then containers pod by pod.
func State(pods, perPod int) ([]*api.PodSandbox, []*api.Container) {
	ps := make([]*api.PodSandbox, 0, pods)
	cs := make([]*api.Container, 0, pods*perPod)
	var n uint64
	for i := 0; i < pods; i++ {
		p := Pod(i)
		ps = append(ps, p)
		for j := 0; j < perPod; j++ {
			c := Container(p, j, n)
			c.State = api.ContainerState_CONTAINER_RUNNING
			cs = append(cs, c)
			n++
		}
	}
	return ps, cs
}
