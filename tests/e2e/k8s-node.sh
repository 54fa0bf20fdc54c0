#!/usr/bin/env bash
# A one-node Kubernetes cluster on the e2e harness's containerd (NRI on):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a
# kubelet, all state under one WORK directory (the harness's), run as
# root. docs/dev/k8s-node.md explains it; tests/e2e/src/k8s.rs drives it.
#
#   tests/e2e/k8s-node.sh available           exit 0 if a node can run here
#   tests/e2e/k8s-node.sh start VERSION WORK  containerd VERSION (2.3 | 2.4) + the node
#   tests/e2e/k8s-node.sh stop WORK           tear everything down (idempotent)
#   tests/e2e/k8s-node.sh env WORK            KUBECONFIG=... and the node's facts
#   tests/e2e/k8s-node.sh kubectl WORK ARGS   kubectl as the cluster admin
#   tests/e2e/k8s-node.sh logs WORK [LINES]   log locations and tails
#
# Binaries: scripts/setup-k8s.sh (its env file: NRI_K8S_ENV, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/k8s/env.sh); containerd, runc, CNI
# plugins and the images: scripts/setup-e2e.sh.
#
# The node is what a kubeadm node is where it matters to NRI plugins:
# containerd's NRI socket is the host's /var/run/nri/nri.sock (the
# DaemonSets of deploy/ mount that directory), pods get their own network
# namespace from the distribution's CNI plugins (a bridge with the node as
# gateway, host-local addresses), hostPath volumes are the host's. So one
# node runs on a machine at a time: start refuses while another one runs
# (the owner file /run/nri-rs-k8s-node names its WORK).
#
# Certificates (EC P-256, one CA) and kubeconfigs are made with openssl at
# each start under WORK/k8s/pki; authorization is Node,RBAC as on a kubeadm
# cluster; the admin is in system:masters. etcd and the control plane
# listen on 127.0.0.1 only, on free ports; the kubelet on the node's
# address (the first address of the interface of the default route).
#
# Environment (optional): NRI_K8S_NODE_NAME (default nri-e2e-node),
# NRI_K8S_START_TIMEOUT (seconds, default 120), NRI_E2E_* knobs of
# harness.sh's start.

_K8S_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=harness.sh
. "$_K8S_DIR/harness.sh"

_K8S_OWNER=/run/nri-rs-k8s-node
_K8S_NRI_SOCKET=/var/run/nri/nri.sock

_k8s_log() { printf '[k8s-node] %s\n' "$*" >&2; }
_k8s_err() { printf '[k8s-node] ERROR: %s\n' "$*" >&2; }

_k8s_env_file() {
    printf '%s' "${NRI_K8S_ENV:-${NRI_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/k8s}/env.sh}"
}

_k8s_load_env() {
    local f
    f=$(_k8s_env_file)
    [ -f "$f" ] || { _k8s_err "no Kubernetes env file at $f; run scripts/setup-k8s.sh"; return 1; }
    # shellcheck disable=SC1090
    . "$f"
}

# available: exit 0 if a node can run here.
k8s_available() {
    e2e_available || return 1
    _k8s_load_env || return 1
    local b
    for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
        [ -x "$NRI_K8S_BIN/$b" ] || { _k8s_err "missing $NRI_K8S_BIN/$b; run scripts/setup-k8s.sh"; return 1; }
    done
    for b in openssl curl ss ip; do
        command -v "$b" >/dev/null || { _k8s_err "$b not on PATH"; return 1; }
    done
}

# ------------------------------------------------------------------ pieces

# N distinct free TCP ports (one a line) from a range derived from WORK.
_k8s_free_ports() {
    local work=$1 n=$2 used p base
    used=$(ss -Hltn | awk '{print $4}' | sed 's/.*://' | sort -u)
    base=$(( 20000 + $(printf '%s' "$work" | cksum | cut -d' ' -f1) % 10000 ))
    p=$base
    while [ "$n" -gt 0 ]; do
        if ! grep -qx "$p" <<<"$used"; then printf '%s\n' "$p"; n=$((n - 1)); fi
        p=$((p + 1))
    done
}

# The node's address: the source address of the default route.
_k8s_node_ip() {
    ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n1
}

# cert DIR NAME SUBJECT EKU [SAN]: NAME.key (EC P-256) and NAME.crt signed by DIR/ca.
_k8s_cert() {
    local d=$1 name=$2 subj=$3 eku=$4 san=${5:-}
    openssl ecparam -name prime256v1 -genkey -noout -out "$d/$name.key" 2>/dev/null || return 1
    openssl req -new -key "$d/$name.key" -subj "$subj" -out "$d/$name.csr" 2>/dev/null || return 1
    {
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n'
        printf 'extendedKeyUsage=%s\n' "$eku"
        [ -z "$san" ] || printf 'subjectAltName=%s\n' "$san"
    } >"$d/$name.ext"
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
        -days 30 -sha256 -extfile "$d/$name.ext" -out "$d/$name.crt" 2>/dev/null || return 1
    rm -f "$d/$name.csr" "$d/$name.ext"
}

# kubeconfig FILE SERVER CA CERT KEY USER
_k8s_kubeconfig() {
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nri-e2e
  cluster:
    server: $2
    certificate-authority: $3
users:
- name: $6
  user:
    client-certificate: $4
    client-key: $5
contexts:
- name: nri-e2e
  context:
    cluster: nri-e2e
    user: $6
current-context: nri-e2e
EOF
}

# The PKI and kubeconfigs of a node (k8s.env's values must be set).
_k8s_pki() {
    local k=$1 node=$2 ip=$3 api=$4 d=$1/pki
    mkdir -p "$d"
    openssl ecparam -name prime256v1 -genkey -noout -out "$d/ca.key" 2>/dev/null || return 1
    openssl req -x509 -new -key "$d/ca.key" -subj "/CN=nri-e2e-ca" -days 30 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$d/ca.crt" 2>/dev/null || return 1
    _k8s_cert "$d" apiserver "/CN=kube-apiserver" serverAuth \
        "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$ip,IP:10.250.0.1" || return 1
    _k8s_cert "$d" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth || return 1
    _k8s_cert "$d" admin "/O=system:masters/CN=kubernetes-admin" clientAuth || return 1
    _k8s_cert "$d" controller-manager "/CN=system:kube-controller-manager" clientAuth || return 1
    _k8s_cert "$d" scheduler "/CN=system:kube-scheduler" clientAuth || return 1
    _k8s_cert "$d" kubelet-client "/O=system:nodes/CN=system:node:$node" clientAuth || return 1
    _k8s_cert "$d" kubelet "/CN=$node" serverAuth "DNS:$node,IP:$ip,IP:127.0.0.1" || return 1
    # Service account tokens: an EC key pair (ES256).
    openssl ecparam -name prime256v1 -genkey -noout -out "$d/sa.key" 2>/dev/null || return 1
    openssl ec -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null || return 1
    local s="https://127.0.0.1:$api"
    _k8s_kubeconfig "$k/admin.conf" "$s" "$d/ca.crt" "$d/admin.crt" "$d/admin.key" kubernetes-admin
    _k8s_kubeconfig "$k/controller-manager.conf" "$s" "$d/ca.crt" "$d/controller-manager.crt" \
        "$d/controller-manager.key" system:kube-controller-manager
    _k8s_kubeconfig "$k/scheduler.conf" "$s" "$d/ca.crt" "$d/scheduler.crt" "$d/scheduler.key" system:kube-scheduler
    _k8s_kubeconfig "$k/kubelet.conf" "$s" "$d/ca.crt" "$d/kubelet-client.crt" "$d/kubelet-client.key" \
        "system:node:$node"
}

# The node's CNI network (before containerd starts): the harness's bridge
# (same name, so its stop deletes it) with the node as gateway, so the node
# reaches its pods as a kubelet and an operator expect.
_k8s_cni() {
    local work=$1 p h
    mkdir -p "$work/cni/bin" "$work/cni/net.d"
    for p in bridge host-local loopback portmap; do
        [ -x "$NRI_E2E_CNI_BIN/$p" ] && ln -sf "$NRI_E2E_CNI_BIN/$p" "$work/cni/bin/$p"
    done
    h=$(printf '%s' "$work" | sha256sum)
    jq -n --arg br "$(_e2e_bridge "$work")" --arg dir "$work/cni/ipam" \
        --arg net "10.$((16#${h:0:2} % 200 + 50)).$((16#${h:2:2})).0/24" '{
        cniVersion: "1.0.0", name: "nri-e2e-k8s",
        plugins: [
            {type: "bridge", bridge: $br, isGateway: true, ipMasq: false, hairpinMode: true,
             ipam: {type: "host-local", dataDir: $dir, ranges: [[{subnet: $net}]]}},
            {type: "portmap", capabilities: {portMappings: true}}
        ]
    }' >"$work/cni/net.d/10-nri-e2e-k8s.conflist"
}

# launch WORK NAME BINARY ARGS...: start in the background, own session,
# pid in WORK/k8s/NAME.pid, log in WORK/k8s/NAME.log.
_k8s_launch() {
    local k=$1/k8s name=$2; shift 2
    {
        setsid "$@" >"$k/$name.log" 2>&1 </dev/null &
        echo $! >"$k/$name.pid"
    }
}

# wait_for WORK WHAT TIMEOUT_S CMD...: poll CMD until it succeeds; fail if
# one of the node's processes died meanwhile.
_k8s_wait() {
    local work=$1 what=$2 t=$3; shift 3
    local deadline=$(( $(date +%s) + t )) name
    until "$@" >/dev/null 2>&1; do
        for name in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet; do
            if [ -f "$work/k8s/$name.pid" ] && ! kill -0 "$(cat "$work/k8s/$name.pid")" 2>/dev/null; then
                _k8s_err "$name exited while waiting for $what; last lines of $work/k8s/$name.log:"
                tail -n 30 "$work/k8s/$name.log" | sed 's/^/  | /' >&2
                return 1
            fi
        done
        if [ "$(date +%s)" -ge "$deadline" ]; then
            _k8s_err "$what not within ${t}s"; return 1
        fi
        sleep 0.2
    done
}

_k8s_etcd_healthy() { curl -sf "http://127.0.0.1:$1/health" | grep -q '"health":"true"'; }

# kubectl WORK ARGS...: kubectl as the cluster admin.
k8s_kubectl() {
    local work=${1:?usage: kubectl WORK ARGS...}; shift
    _k8s_load_env || return 1
    "$NRI_K8S_BIN/kubectl" --kubeconfig "$work/k8s/admin.conf" "$@"
}

_k8s_node_ready() {
    [ "$(k8s_kubectl "$1" get node "$2" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

_k8s_write_kubelet_config() {
    local work=$1 k=$1/k8s port=$2 healthz=$3
    cat >"$k/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
tlsCertFile: $k/pki/kubelet.crt
tlsPrivateKeyFile: $k/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $k/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$work/containerd.sock
cgroupDriver: cgroupfs
# No QoS cgroup tree and no node allocatable enforcement: the machine's
# cgroups belong to whatever else runs there.
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
podLogsDir: $k/pod-logs
# Test machines are small and shared: evict only when nearly out, and
# never collect images (the imported ones cannot be pulled again).
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# Room for the rollout test's stream of pods (the default is 110).
maxPods: 200
EOF
}

# start VERSION WORK: containerd VERSION under WORK, then the node.
k8s_start() {
    local version=${1:?usage: start VERSION WORK} work=${2:?usage: start VERSION WORK}
    local t0 node=${NRI_K8S_NODE_NAME:-nri-e2e-node} tmo=${NRI_K8S_START_TIMEOUT:-120}
    t0=$(_e2e_now)
    k8s_available || return 1
    work=$(_e2e_abs "$work") || return 1
    if [ -f "$_K8S_OWNER" ]; then
        local other
        other=$(cat "$_K8S_OWNER")
        if [ "$other" != "$work" ] && e2e_status "$other" 2>/dev/null; then
            _k8s_err "another node runs in $other (stop it: $0 stop $other)"; return 1
        fi
    fi
    [ -d "$work/k8s" ] && { k8s_stop "$work" || return 1; }
    printf '%s\n' "$work" >"$_K8S_OWNER"
    local k=$work/k8s ip ports
    rm -rf "$k" "$work/cni"
    mkdir -p "$k/pod-logs" "$k/kubelet"
    ip=$(_k8s_node_ip)
    [ -n "$ip" ] || { _k8s_err "no default route: the kubelet needs a non-loopback node address"; return 1; }
    mapfile -t ports < <(_k8s_free_ports "$work" 5)
    local etcd_c=${ports[0]} etcd_p=${ports[1]} api=${ports[2]} kl=${ports[3]} klh=${ports[4]}
    cat >"$k/k8s.env" <<EOF
K8S_NODE='$node'
K8S_NODE_IP='$ip'
K8S_API_PORT='$api'
K8S_ETCD_PORT='$etcd_c'
K8S_KUBELET_PORT='$kl'
EOF
    _k8s_pki "$k" "$node" "$ip" "$api" || { _k8s_err "making the certificates failed"; return 1; }
    _k8s_cni "$work"
    NRI_E2E_NRI_SOCKET=$_K8S_NRI_SOCKET e2e_start "$version" "$work" || return 1
    local tc
    tc=$(_e2e_now)

    local d=$k/pki
    _k8s_launch "$work" etcd "$NRI_K8S_BIN/etcd" --name nri-e2e --data-dir "$k/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_c" --advertise-client-urls "http://127.0.0.1:$etcd_c" \
        --listen-peer-urls "http://127.0.0.1:$etcd_p" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_p" \
        --initial-cluster "nri-e2e=http://127.0.0.1:$etcd_p" --unsafe-no-fsync --log-level warn
    _k8s_wait "$work" "etcd health" "$tmo" _k8s_etcd_healthy "$etcd_c" || return 1
    _k8s_launch "$work" kube-apiserver "$NRI_K8S_BIN/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$etcd_c" --bind-address 127.0.0.1 --secure-port "$api" \
        --advertise-address "$ip" --service-cluster-ip-range 10.250.0.0/24 \
        --cert-dir "$k/apiserver" --tls-cert-file "$d/apiserver.crt" --tls-private-key-file "$d/apiserver.key" \
        --client-ca-file "$d/ca.crt" --kubelet-certificate-authority "$d/ca.crt" \
        --kubelet-client-certificate "$d/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$d/apiserver-kubelet-client.key" \
        --kubelet-preferred-address-types InternalIP \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$d/sa.pub" --service-account-signing-key-file "$d/sa.key" \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --allow-privileged=true --profiling=false
    _k8s_wait "$work" "kube-apiserver /readyz" "$tmo" k8s_kubectl "$work" get --raw /readyz || return 1
    local ta
    ta=$(_e2e_now)
    _k8s_launch "$work" kube-controller-manager "$NRI_K8S_BIN/kube-controller-manager" \
        --kubeconfig "$k/controller-manager.conf" --secure-port 0 --leader-elect=false \
        --use-service-account-credentials --service-account-private-key-file "$d/sa.key" \
        --root-ca-file "$d/ca.crt" --cluster-signing-cert-file "$d/ca.crt" \
        --cluster-signing-key-file "$d/ca.key" --profiling=false
    _k8s_launch "$work" kube-scheduler "$NRI_K8S_BIN/kube-scheduler" \
        --kubeconfig "$k/scheduler.conf" --secure-port 0 --leader-elect=false --profiling=false
    _k8s_write_kubelet_config "$work" "$kl" "$klh"
    _k8s_launch "$work" kubelet "$NRI_K8S_BIN/kubelet" --config "$k/kubelet.yaml" \
        --kubeconfig "$k/kubelet.conf" --root-dir "$k/kubelet" --cert-dir "$k/kubelet/pki" \
        --hostname-override "$node" --node-ip "$ip"
    _k8s_wait "$work" "node $node Ready" "$tmo" _k8s_node_ready "$work" "$node" || return 1
    # Pods of a new namespace need its service account; the first ones
    # wait for the controllers' first round.
    _k8s_wait "$work" "service account default/default" "$tmo" \
        k8s_kubectl "$work" -n default get serviceaccount default || return 1
    _k8s_log "node $node (Kubernetes $NRI_K8S_VERSION, containerd $version) ready in $work after $(_e2e_since "$t0") s" \
        "(containerd $(_e2e_since "$t0" | awk -v a="$(_e2e_since "$tc")" '{printf "%.1f", $1 - a}') s," \
        "control plane up $(awk -v a="$tc" -v b="$ta" 'BEGIN { printf "%.1f", b - a }') s later)"
    printf 'export KUBECONFIG=%s\n' "$k/admin.conf"
}

# stop WORK: the kubelet first (it would recreate what goes away), then the
# control plane and etcd, then the harness's stop (pods, containerd,
# mounts, cgroups, the bridge). Idempotent.
k8s_stop() {
    local work=${1:?usage: stop WORK} rc=0 t0 times=""
    [ -d "$work" ] || return 0
    work=$(cd "$work" && pwd -P)
    t0=$(_e2e_now)
    _k8s_end "$work" kubelet || rc=1
    times="$times control-plane $(_e2e_since "$t0")"
    _k8s_end "$work" kube-scheduler kube-controller-manager kube-apiserver etcd || rc=1
    times="$times containerd $(_e2e_since "$t0")"
    e2e_stop "$work" || rc=1
    # The kubelet's links to container logs (a fixed host directory).
    find /var/log/containers -maxdepth 1 -lname "$work/*" -delete 2>/dev/null || true
    if [ -f "$_K8S_OWNER" ] && [ "$(cat "$_K8S_OWNER")" = "$work" ]; then
        rm -f "$_K8S_OWNER"
    fi
    _k8s_log "node in $work stopped after $(_e2e_since "$t0") s (each part's start:$times)"
    return $rc
}

# end WORK NAME...: TERM the node's processes NAME... (by their pid files)
# together, then KILL what is left after 3 s: nothing of the node
# outlives it, so no need to wait long for a graceful end (the API
# server takes its time).
_k8s_end() {
    local work=$1 name pid p pids=() rc=0; shift
    for name in "$@"; do
        [ -f "$work/k8s/$name.pid" ] || continue
        pid=$(cat "$work/k8s/$name.pid")
        rm -f "$work/k8s/$name.pid"
        kill -0 "$pid" 2>/dev/null || continue
        kill -TERM "$pid" 2>/dev/null || true
        pids+=("$name:$pid")
    done
    for p in "${pids[@]}"; do
        pid=${p#*:}
        if ! _e2e_wait_gone "$pid" 30; then
            _k8s_log "${p%%:*} ($pid) still there 3 s after TERM; killing"
            kill -KILL "$pid" 2>/dev/null || true
            _e2e_wait_gone "$pid" 50 || rc=1
        fi
    done
    return $rc
}

# env WORK: KEY=VALUE facts of a started node.
k8s_env() {
    local work=${1:?usage: env WORK}
    work=$(cd "$work" && pwd -P) || return 1
    [ -f "$work/k8s/k8s.env" ] || { _k8s_err "$work has no node; call start first"; return 1; }
    local K8S_NODE K8S_NODE_IP K8S_API_PORT K8S_ETCD_PORT K8S_KUBELET_PORT
    # shellcheck disable=SC1091
    . "$work/k8s/k8s.env"
    _k8s_load_env || return 1
    cat <<EOF
KUBECONFIG=$work/k8s/admin.conf
NRI_K8S_KUBECTL=$NRI_K8S_BIN/kubectl
NRI_K8S_VERSION=$NRI_K8S_VERSION
NRI_K8S_NODE=$K8S_NODE
NRI_K8S_NODE_IP=$K8S_NODE_IP
NRI_K8S_API_PORT=$K8S_API_PORT
NRI_K8S_NRI_SOCKET=$_K8S_NRI_SOCKET
EOF
    e2e_env "$work"
}

# logs WORK [LINES]: where the logs are, and their tails.
k8s_logs() {
    local work=${1:?usage: logs WORK [LINES]} n=${2:-20} f
    for f in "$work"/k8s/*.log; do
        [ -f "$f" ] || continue
        printf '[k8s-node] last %s lines of %s:\n' "$n" "$f" >&2
        tail -n "$n" "$f" | sed 's/^/  | /' >&2
    done
    e2e_logs "$work" "$n"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    cmd=${1:-}
    case "$cmd" in
        available|start|stop|env|kubectl|logs) shift; "k8s_$cmd" "$@"; exit $? ;;
        *) sed -n '2,14p' "$0" >&2; exit 2 ;;
    esac
fi
