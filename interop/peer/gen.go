package peer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// message is a pointer to a protobuf message type T: the NRI API type of the
// caller's module (api.PodSandbox, api.Container, ...). The shapes below are
// written once as protojson documents (proto field names) and decoded into
// whichever NRI version's type the caller names, so both peer modules build
// byte-identical requests.
type message[T any] interface {
	*T
	proto.Message
}

// decode turns a protojson document into a new P. The documents are ours
// and fixed, so a failure is a bug in this file: it panics.
func decode[T any, P message[T]](doc map[string]any) P {
	return decodeAs[P](doc)
}

// decodeAs is decode for a message type named by its pointer type alone.
func decodeAs[M proto.Message](doc map[string]any) M {
	b, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("peer: shape document: %v", err))
	}
	m := newOf[M]()
	if err := protojson.Unmarshal(b, m); err != nil {
		panic(fmt.Sprintf("peer: shape document does not fit %T: %v", m, err))
	}
	return m
}

// newOf returns a new, empty M (a pointer to a generated message type). The
// generated ProtoReflect works on a nil pointer, and its type makes new
// messages.
func newOf[M proto.Message]() M {
	var zero M
	m, _ := zero.ProtoReflect().Type().New().Interface().(M)
	return m
}

func optional(v int64) map[string]any { return map[string]any{"value": v} }

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

// podFacts are the parts of pod i that its containers repeat.
type podFacts struct {
	id, uid, name, namespace, app string
}

func podOf(i int) podFacts {
	return podFacts{
		id:        HexID("pod", uint64(i)),
		uid:       UID(uint64(i)),
		name:      fmt.Sprintf("bench-app-%d-7d9f8c6b5d-x%04d", i, i%10000),
		namespace: "bench-namespace",
		app:       fmt.Sprintf("bench-app-%d", i),
	}
}

// Pod builds pod number i as the caller's api.PodSandbox (T), in a realistic
// Kubernetes shape: 10 labels, 10 annotations, runtime handler, cgroup
// parent/path, 3 namespaces, pod resources (memory limit, CPU
// shares/quota/period) and one IP. About 1.4 KB serialized.
func Pod[T any, P message[T]](i int) P {
	return decode[T, P](podDoc(i))
}

func podDoc(i int) map[string]any {
	p := podOf(i)
	return map[string]any{
		"id":        p.id,
		"name":      p.name,
		"uid":       p.uid,
		"namespace": p.namespace,
		"labels": map[string]string{
			"app.kubernetes.io/name":       p.app,
			"app.kubernetes.io/instance":   fmt.Sprintf("bench-app-%d-prod", i),
			"app.kubernetes.io/version":    "1.27.3",
			"app.kubernetes.io/component":  "backend",
			"app.kubernetes.io/part-of":    "bench-suite",
			"app.kubernetes.io/managed-by": "helm",
			"pod-template-hash":            "7d9f8c6b5d",
			"io.kubernetes.pod.name":       p.name,
			"io.kubernetes.pod.namespace":  p.namespace,
			"io.kubernetes.pod.uid":        p.uid,
		},
		"annotations": map[string]string{
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
		},
		"runtime_handler": "runc",
		"linux": map[string]any{
			"cgroup_parent": "kubepods-burstable-pod" + p.uid + ".slice",
			"cgroups_path":  "kubepods-burstable-pod" + p.uid + ".slice:cri-containerd:" + p.id,
			"namespaces": []any{
				map[string]any{"type": "network", "path": "/var/run/netns/cni-" + p.uid},
				map[string]any{"type": "ipc"},
				map[string]any{"type": "uts"},
			},
			"pod_resources": map[string]any{
				"memory": map[string]any{"limit": optional(512 << 20)},
				"cpu": map[string]any{
					"shares": optional(512),
					"quota":  optional(50000),
					"period": optional(100000),
				},
			},
		},
		"ips": []string{fmt.Sprintf("10.244.%d.%d", (i/250)%256, i%250+2)},
	}
}

// Container builds container j (globally numbered n) of pod number pod as
// the caller's api.Container (T), state CREATED: 10 labels, 10 annotations,
// 3 args, 10 env vars, 5 kubelet-style bind mounts, 5 namespaces, memory
// limit+swap, CPU shares/quota/period/cpus/mems, one unified key,
// oom_score_adj and a systemd-style cgroups path. About 2.7 KB serialized.
func Container[T any, P message[T]](pod, j int, n uint64) P {
	return decode[T, P](containerDoc(podOf(pod), j, n, "CONTAINER_CREATED"))
}

func containerDoc(pod podFacts, j int, n uint64, state string) map[string]any {
	id := HexID("ctr", n)
	name := fmt.Sprintf("bench-ctr-%d", j)
	podDir := "/var/lib/kubelet/pods/" + pod.uid
	sandboxDir := "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/" + pod.id
	mount := func(dst, src, mode string) map[string]any {
		return map[string]any{"destination": dst, "type": "bind", "source": src, "options": []string{"rbind", "rprivate", mode}}
	}
	ns := func(t string) map[string]any { return map[string]any{"type": t} }
	return map[string]any{
		"id":             id,
		"pod_sandbox_id": pod.id,
		"name":           name,
		"state":          state,
		"labels": map[string]string{
			"io.kubernetes.container.name": name,
			"io.kubernetes.pod.name":       pod.name,
			"io.kubernetes.pod.namespace":  pod.namespace,
			"io.kubernetes.pod.uid":        pod.uid,
			"app.kubernetes.io/name":       pod.app,
			"app.kubernetes.io/component":  "backend",
			"app.kubernetes.io/version":    "1.27.3",
			"tier":                         "backend",
			"track":                        "stable",
			"release":                      "bench-release",
		},
		"annotations": map[string]string{
			"io.kubernetes.container.hash":                     "5f7b2a9c",
			"io.kubernetes.container.restartCount":             "0",
			"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
			"io.kubernetes.container.terminationMessagePolicy": "File",
			"io.kubernetes.pod.terminationGracePeriod":         "30",
			"io.kubernetes.container.ports":                    `[{"name":"http","containerPort":8080,"protocol":"TCP"}]`,
			"io.kubernetes.cri.container-type":                 "container",
			"io.kubernetes.cri.image-name":                     "registry.example.com/bench/app:1.27.3",
			"io.kubernetes.cri.sandbox-id":                     pod.id,
			"io.kubernetes.cri.sandbox-name":                   pod.name,
		},
		"args": []string{"/app/server", "--config=/etc/app/config.yaml", "--port=8080"},
		"env": []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOSTNAME=" + pod.name,
			"KUBERNETES_SERVICE_HOST=10.96.0.1",
			"KUBERNETES_SERVICE_PORT=443",
			"KUBERNETES_PORT=tcp://10.96.0.1:443",
			"APP_MODE=production",
			"APP_LOG_LEVEL=info",
			"APP_LISTEN_ADDR=0.0.0.0:8080",
			"APP_DB_URL=postgres://bench@db.bench-namespace.svc:5432/bench",
			"GOMAXPROCS=2",
		},
		"mounts": []any{
			mount("/etc/hosts", podDir+"/etc-hosts", "rw"),
			mount("/dev/termination-log", podDir+"/containers/"+name+"/5f7b2a9c", "rw"),
			mount("/etc/hostname", sandboxDir+"/hostname", "rw"),
			mount("/etc/resolv.conf", sandboxDir+"/resolv.conf", "rw"),
			mount("/var/run/secrets/kubernetes.io/serviceaccount", podDir+"/volumes/kubernetes.io~projected/kube-api-access-x7k2p", "ro"),
		},
		"linux": map[string]any{
			"namespaces": []any{
				ns("pid"), ns("ipc"), ns("uts"), ns("mount"),
				map[string]any{"type": "network", "path": "/var/run/netns/cni-" + pod.uid},
			},
			"resources": map[string]any{
				"memory": map[string]any{
					"limit": optional(256 << 20),
					"swap":  optional(256 << 20),
				},
				"cpu": map[string]any{
					"shares": optional(256),
					"quota":  optional(25000),
					"period": optional(100000),
					"cpus":   "0-1",
					"mems":   "0",
				},
				"unified": map[string]string{"memory.oom.group": "1"},
			},
			"oom_score_adj": optional(996),
			"cgroups_path":  "kubepods-burstable-pod" + pod.uid + ".slice:cri-containerd:" + id,
		},
	}
}

// State builds pods x perPod containers as the caller's api.PodSandbox (TP)
// and api.Container (TC), containers RUNNING, in a deterministic order: all
// pods, then containers pod by pod.
func State[TP, TC any, PP message[TP], PC message[TC]](pods, perPod int) ([]PP, []PC) {
	return generate[PP, PC](pods, perPod)
}

// generate is State for message types named by their pointer types.
func generate[P, C proto.Message](pods, perPod int) ([]P, []C) {
	ps := make([]P, 0, pods)
	cs := make([]C, 0, pods*perPod)
	var n uint64
	for i := 0; i < pods; i++ {
		ps = append(ps, decodeAs[P](podDoc(i)))
		for j := 0; j < perPod; j++ {
			cs = append(cs, decodeAs[C](containerDoc(podOf(i), j, n, "CONTAINER_RUNNING")))
			n++
		}
	}
	return ps, cs
}
