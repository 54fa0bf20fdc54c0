#!/usr/bin/env bash
# End-to-end harness: a private, real containerd (2.1.x, 2.3.x or 2.4.x) with NRI,
# runc and crictl, all state under one WORK directory.
#
# Two ways to use it (see tests/e2e/README.md for the full API):
#   CLI:      tests/e2e/harness.sh SUBCOMMAND ARGS...
#   library:  source tests/e2e/harness.sh; e2e_SUBCOMMAND ARGS...
#
# Tools come from the env file written by scripts/setup-e2e.sh
# (NRI_E2E_ENV, default ${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/e2e/env.sh).

# ------------------------------------------------------------------ basics

_e2e_log() { printf '[nri-e2e] %s\n' "$*" >&2; }
_e2e_err() { printf '[nri-e2e] ERROR: %s\n' "$*" >&2; }

_e2e_now() { date +%s.%N; }

# Seconds (float) since $1.
_e2e_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

_e2e_env_file() {
    printf '%s' "${NRI_E2E_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/e2e/env.sh}"
}

# Load the tool paths. Returns 1 (with a message) if setup has not run.
_e2e_load_env() {
    [ -n "${_E2E_ENV_LOADED:-}" ] && return 0
    local f
    f=$(_e2e_env_file)
    if [ ! -f "$f" ]; then
        _e2e_err "no e2e env file at $f; run scripts/setup-e2e.sh first"
        return 1
    fi
    # shellcheck disable=SC1090
    . "$f"
    _E2E_ENV_LOADED=1
}

# Absolute path of WORK (created if needed).
_e2e_abs() {
    mkdir -p "$1" && (cd "$1" && pwd -P)
}

# Print where the logs are and the tail of containerd's log.
e2e_logs() {
    local work=${1:?usage: logs WORK [LINES]} n=${2:-40}
    {
        printf '[nri-e2e] logs under %s:\n' "$work"
        printf '  containerd log: %s\n' "$work/containerd.log"
        printf '  config:         %s\n' "$work/config.toml"
        printf '  pod/container logs: %s\n' "$work/logs"
        if [ -f "$work/containerd.log" ]; then
            printf '[nri-e2e] last %s lines of containerd.log:\n' "$n"
            tail -n "$n" "$work/containerd.log" | sed 's/^/  | /'
        fi
    } >&2
}

# Fail: message, log locations and containerd log tail.
_e2e_fail() {
    local work=$1; shift
    _e2e_err "$*"
    [ -n "$work" ] && e2e_logs "$work"
    return 1
}

# The NRI socket of WORK's containerd: WORK/nri.sock unless start was given
# NRI_E2E_NRI_SOCKET (kept in WORK/harness.env for restart and stop).
_e2e_nri_socket_of() {
    local E2E_NRI_SOCKET=""
    # shellcheck disable=SC1091
    [ -f "$1/harness.env" ] && . "$1/harness.env"
    printf '%s' "${E2E_NRI_SOCKET:-$1/nri.sock}"
}

# Read a value from WORK/harness.env (written by start).
_e2e_work_env() {
    local work=$1
    if [ ! -f "$work/harness.env" ]; then
        _e2e_err "$work is not a harness WORK dir (no harness.env); call start first"
        return 1
    fi
    # shellcheck disable=SC1091
    . "$work/harness.env"
}

# ------------------------------------------------------------------ checks

# available: exit 0 if the harness can run here (root, setup done, tools present).
e2e_available() {
    [ "$(id -u)" = 0 ] || { _e2e_err "not root"; return 1; }
    _e2e_load_env || return 1
    local p
    [ -n "${NRI_E2E_CONTAINERD_2_4:-}" ] \
        || { _e2e_err "no containerd 2.4 in the env file; run scripts/setup-e2e.sh"; return 1; }
    for p in "$NRI_E2E_CONTAINERD_2_1/containerd" "$NRI_E2E_CONTAINERD_2_3/containerd" \
             "$NRI_E2E_CONTAINERD_2_4/containerd" "$NRI_E2E_CRICTL" "$NRI_E2E_PAUSE_TAR" "$NRI_E2E_BUSYBOX_TAR"; do
        [ -e "$p" ] || { _e2e_err "missing $p; run scripts/setup-e2e.sh"; return 1; }
    done
    for p in runc jq findmnt setsid; do
        command -v "$p" >/dev/null || { _e2e_err "$p not on PATH; run scripts/setup-e2e.sh"; return 1; }
    done
}

# bindir VERSION: print the bin dir for 2.1 / 2.3 / 2.4 / an explicit dir.
e2e_bindir() {
    local v=${1:?usage: bindir VERSION}
    _e2e_load_env || return 1
    case "$v" in
        2.1|v2.1|v2.1.*) printf '%s\n' "$NRI_E2E_CONTAINERD_2_1" ;;
        2.3|v2.3|v2.3.*) printf '%s\n' "$NRI_E2E_CONTAINERD_2_3" ;;
        2.4|v2.4|v2.4.*)
            [ -n "${NRI_E2E_CONTAINERD_2_4:-}" ] \
                || { _e2e_err "no containerd 2.4 in the env file; run scripts/setup-e2e.sh"; return 1; }
            printf '%s\n' "$NRI_E2E_CONTAINERD_2_4" ;;
        /*) printf '%s\n' "$v" ;;
        *) _e2e_err "unknown containerd version '$v' (use 2.1, 2.3, 2.4 or a bin dir)"; return 1 ;;
    esac
}

# versions: the containerd versions the harness knows (one per line).
e2e_versions() { printf '2.1\n2.3\n2.4\n'; }

# ------------------------------------------------------------------ start

_e2e_write_config() {
    local work=$1 bindir=$2
    local reg=${NRI_E2E_REGISTRATION_TIMEOUT:-5s} req=${NRI_E2E_REQUEST_TIMEOUT:-2s}
    local disable_conn=${NRI_E2E_DISABLE_CONNECTIONS:-false}
    local level=${NRI_E2E_LOG_LEVEL:-info}
    # The shim socket dir is configurable from containerd 2.2 on; 2.0/2.1
    # put shim sockets in /run/containerd/s (names hashed from the address,
    # so still distinct per WORK).
    local shim_section="[plugins.'io.containerd.shim.v1.manager']
    socket_dir = '$work/s'"
    case "$("$bindir/containerd" --version 2>/dev/null | awk '{print $3}')" in
        v2.0.*|v2.1.*) shim_section="# shim socket_dir: not supported by this containerd" ;;
    esac
    # A second runtime handler on a runc with linux.netDevices (Debian's
    # runc has none), for pods run with `pod --runtime runc-netdev`.
    local netdev_runtime="# runc-netdev: no NRI_E2E_RUNC_NETDEV in the env file"
    if [ -n "${NRI_E2E_RUNC_NETDEV:-}" ] && [ -x "$NRI_E2E_RUNC_NETDEV" ]; then
        netdev_runtime="[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc-netdev]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc-netdev.options]
          SystemdCgroup = false
          BinaryName = '$NRI_E2E_RUNC_NETDEV'
          Root = '$work/runc-netdev'"
    fi
    cat >"$work/config.toml" <<EOF
# Written by tests/e2e/harness.sh; everything private under $work.
version = 3
root = '$work/root'
state = '$work/state'
imports = []

[grpc]
  address = '$work/containerd.sock'

[ttrpc]
  address = '$work/containerd.sock.ttrpc'

[debug]
  level = '$level'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '$NRI_E2E_PAUSE_IMAGE'

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = '$work/runc'
      $netdev_runtime
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['$work/cni/bin']
      conf_dir = '$work/cni/net.d'

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'

  [plugins.'io.containerd.internal.v1.opt']
    path = '$work/opt'

  $shim_section

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    disable_connections = $disable_conn
    socket_path = '$(_e2e_nri_socket_of "$work")'
    plugin_path = '$work/nri/plugins'
    plugin_config_path = '$work/nri/conf.d'
    plugin_registration_timeout = '$reg'
    plugin_request_timeout = '$req'
EOF
    cat >"$work/crictl.yaml" <<EOF
runtime-endpoint: unix://$work/containerd.sock
image-endpoint: unix://$work/containerd.sock
timeout: 30
debug: false
pull-image-on-create: false
EOF
}

# Name of WORK's CNI bridge (at most 15 bytes, distinct per WORK).
_e2e_bridge() { printf 'nrie2e%s' "$(printf '%s' "$1" | sha256sum | cut -c1-8)"; }

# CNI for pods with their own network namespace (`pod --netns`), unless
# WORK's net.d already has a network: a bridge
# (no gateway, no masquerading, so nothing changes on the host beyond the
# bridge itself) with host-local addresses in a /24 derived from WORK, and
# its state under WORK. Host-network pods never call CNI.
_e2e_write_cni() {
    local work=$1 p
    # A test that installed its own CNI set-up before `start` (critest's
    # stand-in) keeps it; so does a restart on the same WORK.
    if [ -n "$(ls -A "$work/cni/net.d" 2>/dev/null)" ]; then
        return 0
    fi
    if [ -z "${NRI_E2E_CNI_BIN:-}" ] || [ ! -x "$NRI_E2E_CNI_BIN/bridge" ]; then
        _e2e_log "no CNI plugins (NRI_E2E_CNI_BIN); pods can only use the host network"
        return 0
    fi
    for p in bridge host-local loopback; do
        ln -sf "$NRI_E2E_CNI_BIN/$p" "$work/cni/bin/$p" || return 1
    done
    local h br
    h=$(printf '%s' "$work" | sha256sum)
    br=$(_e2e_bridge "$work")
    jq -n --arg br "$br" --arg dir "$work/cni/ipam" \
        --arg net "10.$((16#${h:0:2} % 200 + 50)).$((16#${h:2:2})).0/24" '{
        cniVersion: "1.0.0", name: "nri-e2e",
        plugins: [{type: "bridge", bridge: $br, isGateway: false, ipMasq: false,
                   ipam: {type: "host-local", dataDir: $dir, ranges: [[{subnet: $net}]]}}]
    }' >"$work/cni/net.d/10-nri-e2e.conflist"
}

# Start WORK's containerd from BINDIR in the background (pid in
# WORK/containerd.pid, log in WORK/containerd.log) and wait until both
# sockets and the NRI socket exist and CRI answers.
_e2e_launch() {
    local work=$1 bindir=$2
    # containerd finds the shim (and runc) on its PATH.
    {
        PATH="$bindir:$PATH" setsid "$bindir/containerd" --config "$work/config.toml" \
            >"$work/containerd.log" 2>&1 </dev/null &
        echo $! >"$work/containerd.pid"
    }
    local pid nri_sock
    pid=$(cat "$work/containerd.pid")
    nri_sock=$(_e2e_nri_socket_of "$work")
    # setsid execs in place, so $! becomes containerd itself; on a busy
    # machine the exec can take a while after the fork: wait up to 10 s.
    local want tries=0
    want=$(readlink -f "$bindir/containerd")
    while [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" != "$want" ]; do
        if [ $tries -ge 200 ] || ! kill -0 "$pid" 2>/dev/null; then
            _e2e_fail "$work" "pid $pid is not containerd ($(readlink "/proc/$pid/exe" 2>/dev/null))"; return 1
        fi
        tries=$((tries + 1))
        sleep 0.05
    done

    local deadline=$(( $(date +%s) + ${NRI_E2E_START_TIMEOUT:-30} ))
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            _e2e_fail "$work" "containerd (pid $pid) exited during startup"; return 1
        fi
        if [ -S "$work/containerd.sock" ] && [ -S "$work/containerd.sock.ttrpc" ] \
           && { [ "${NRI_E2E_DISABLE_CONNECTIONS:-false}" = true ] || [ -S "$nri_sock" ]; } \
           && e2e_crictl "$work" version >/dev/null 2>&1; then
            break
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            _e2e_fail "$work" "containerd did not become ready within ${NRI_E2E_START_TIMEOUT:-30}s"; return 1
        fi
        sleep 0.1
    done
}

# start VERSION WORK: start containerd VERSION (2.1 | 2.3 | 2.4 | bin dir) with
# everything under WORK, wait until both sockets and the NRI socket exist
# and CRI answers, import both images.
# A previous instance on WORK is stopped first; WORK/nri (plugins, conf.d)
# is kept, all other state is wiped unless NRI_E2E_KEEP_STATE=1.
e2e_start() {
    local version=${1:?usage: start VERSION WORK} work=${2:?usage: start VERSION WORK}
    local t0 bindir
    t0=$(_e2e_now)
    [ "$(id -u)" = 0 ] || { _e2e_err "start needs root"; return 1; }
    _e2e_load_env || return 1
    bindir=$(e2e_bindir "$version") || return 1
    [ -x "$bindir/containerd" ] || { _e2e_err "no containerd in $bindir; run scripts/setup-e2e.sh"; return 1; }
    work=$(_e2e_abs "$work") || return 1
    # Shim sockets are WORK/s/<64 hex>; a unix socket path has <= 107 bytes.
    if [ ${#work} -gt 40 ]; then
        _e2e_err "WORK path too long (${#work} > 40 bytes; shim socket paths would overflow): $work"
        return 1
    fi
    if [ -f "$work/containerd.pid" ] || [ -f "$work/harness.env" ]; then
        e2e_stop "$work" || return 1
    fi
    if [ "${NRI_E2E_KEEP_STATE:-0}" != 1 ]; then
        rm -rf "$work/root" "$work/state" "$work/runc" "$work/s" "$work/opt" \
               "$work/logs" "$work/specs" "$work/containerd.log" "$work/containerd.log.prev"
    fi
    mkdir -p "$work/nri/plugins" "$work/nri/conf.d" "$work/cni/bin" "$work/cni/net.d" \
             "$work/logs" "$work/specs" "$work/runc" "$work/s"
    _e2e_write_cni "$work" || return 1

    local cd_version
    cd_version=$("$bindir/containerd" --version 2>/dev/null | awk '{print $3}')
    # A short id for this WORK, used in cgroup paths.
    local wid
    wid=$(printf '%s' "$work" | sha256sum | cut -c1-10)
    cat >"$work/harness.env" <<EOF
E2E_WORK='$work'
E2E_BINDIR='$bindir'
E2E_VERSION='$cd_version'
E2E_WID='$wid'
E2E_CGROUP_PARENT='/nri-e2e-$wid'
E2E_CRICTL='$NRI_E2E_CRICTL'
E2E_PAUSE_IMAGE='$NRI_E2E_PAUSE_IMAGE'
E2E_BUSYBOX_IMAGE='$NRI_E2E_BUSYBOX_IMAGE'
E2E_NRI_SOCKET='${NRI_E2E_NRI_SOCKET:-$work/nri.sock}'
EOF
    mkdir -p "$(dirname "${NRI_E2E_NRI_SOCKET:-$work/nri.sock}")"
    _e2e_write_config "$work" "$bindir"

    _e2e_launch "$work" "$bindir" || return 1
    local img
    for img in "$NRI_E2E_PAUSE_TAR" "$NRI_E2E_BUSYBOX_TAR"; do
        if ! e2e_ctr "$work" images import "$img" >"$work/import.log" 2>&1; then
            cat "$work/import.log" >&2
            _e2e_fail "$work" "ctr images import $img failed"; return 1
        fi
    done
    _e2e_log "containerd $cd_version up (pid $(cat "$work/containerd.pid")) in $work after $(_e2e_since "$t0") s"
}

# restart WORK: restart WORK's containerd alone, as on a node whose
# containerd is restarted: TERM (KILL after 10 s) by PID, then the same
# binary and config on the same state. Pods, containers and their shims
# keep running; containerd finds them again. containerd.log starts anew
# (the previous text is appended to containerd.log.prev).
e2e_restart() {
    local work=${1:?usage: restart WORK}
    local t0 E2E_BINDIR pid
    t0=$(_e2e_now)
    _e2e_work_env "$work" || return 1
    work=$(cd "$work" && pwd -P)
    pid=$(cat "$work/containerd.pid" 2>/dev/null) || true
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        if ! _e2e_wait_gone "$pid" 100; then
            _e2e_log "containerd $pid ignored TERM; killing"
            kill -KILL "$pid" 2>/dev/null || true
            _e2e_wait_gone "$pid" 50 || { _e2e_fail "$work" "containerd $pid did not exit"; return 1; }
        fi
    fi
    cat "$work/containerd.log" >>"$work/containerd.log.prev" 2>/dev/null
    rm -f "$work/containerd.log" "$(_e2e_nri_socket_of "$work")"
    _e2e_launch "$work" "$E2E_BINDIR" || return 1
    _e2e_log "containerd restarted (pid $(cat "$work/containerd.pid")) in $work after $(_e2e_since "$t0") s"
}

# ------------------------------------------------------------------ passthroughs

# crictl WORK ARGS...: crictl against WORK's containerd.
e2e_crictl() {
    local work=${1:?usage: crictl WORK ARGS...}; shift
    _e2e_load_env || return 1
    "$NRI_E2E_CRICTL" --config "$work/crictl.yaml" "$@"
}

# ctr WORK ARGS...: ctr (same version as the daemon) in namespace k8s.io.
e2e_ctr() {
    local work=${1:?usage: ctr WORK ARGS...}; shift
    local E2E_BINDIR
    _e2e_work_env "$work" || return 1
    "$E2E_BINDIR/ctr" -a "$work/containerd.sock" -n k8s.io "$@"
}

# ------------------------------------------------------------------ pods & containers

# Parse KEY=VALUE pairs into a JSON object: _e2e_kv_json k=v ...
# (one jq call per pair with --arg: jq 1.6 would parse "-x" after --args
# as its own option).
_e2e_kv_json() {
    local kv obj='{}'
    for kv in "$@"; do
        case "$kv" in *=*) ;; *) _e2e_err "expected KEY=VALUE, got '$kv'"; return 1 ;; esac
        obj=$(jq -cn --argjson o "$obj" --arg k "${kv%%=*}" --arg v "${kv#*=}" '$o + {($k): $v}') || return 1
    done
    printf '%s\n' "$obj"
}

# JSON array of the arguments.
_e2e_array_json() {
    local a arr='[]'
    for a in "$@"; do
        arr=$(jq -cn --argjson o "$arr" --arg v "$a" '$o + [$v]') || return 1
    done
    printf '%s\n' "$arr"
}

# pod-json WORK NAME [-a KEY=VAL]... [-l KEY=VAL]... [--netns]: print a
# PodSandboxConfig JSON (no side effects besides the pod log dir); the pod
# is on the host network unless --netns gives it its own namespace (CNI).
e2e_pod_json() {
    local work=${1:?usage: pod-json WORK NAME [-a K=V]... [-l K=V]...}
    local name=${2:?usage: pod-json WORK NAME [-a K=V]... [-l K=V]...}
    shift 2
    local E2E_CGROUP_PARENT
    _e2e_work_env "$work" || return 1
    local annos=() labels=() network=2
    while [ $# -gt 0 ]; do
        case "$1" in
            -a|--annotation) annos+=("${2:?-a needs KEY=VALUE}"); shift 2 ;;
            -l|--label) labels+=("${2:?-l needs KEY=VALUE}"); shift 2 ;;
            --netns) network=0; shift ;;
            *) _e2e_err "pod-json: unknown argument '$1'"; return 1 ;;
        esac
    done
    local aj lj uid
    aj=$(_e2e_kv_json "${annos[@]}") || return 1
    lj=$(_e2e_kv_json "${labels[@]}") || return 1
    uid=$(printf '%s/%s' "$work" "$name" | sha256sum | cut -c1-32)
    mkdir -p "$work/logs/pods/$name"
    jq -cn --arg name "$name" --arg uid "$uid" --arg logdir "$work/logs/pods/$name" \
        --arg cg "$E2E_CGROUP_PARENT/pod$uid" --argjson annos "$aj" --argjson labels "$lj" \
        --argjson network "$network" '{
        metadata: {name: $name, namespace: "nri-e2e", uid: $uid, attempt: 0},
        log_directory: $logdir,
        labels: $labels,
        annotations: $annos,
        linux: {
            cgroup_parent: $cg,
            security_context: {namespace_options: {network: $network, pid: 1, ipc: 0}}
        }
    }'
}

# runp WORK POD_JSON_FILE [RUNTIME_HANDLER]: run a pod from a JSON file;
# print its id.
e2e_runp() {
    local work=${1:?usage: runp WORK POD_JSON_FILE} file=${2:?usage: runp WORK POD_JSON_FILE}
    local handler=${3:-} id rt=()
    [ -z "$handler" ] || rt=(--runtime "$handler")
    if ! id=$(e2e_crictl "$work" runp "${rt[@]}" "$file"); then
        _e2e_fail "$work" "crictl runp $file failed"; return 1
    fi
    mkdir -p "$work/specs"
    cp "$file" "$work/specs/pod-$id.json"
    printf '%s\n' "$id"
}

# pod WORK NAME [-a K=V]... [-l K=V]... [--netns] [--runtime HANDLER]: run a
# pod (host network unless --netns); print its id.
e2e_pod() {
    local work=${1:?usage: pod WORK NAME [-a K=V]... [-l K=V]...}
    local name=${2:?usage: pod WORK NAME [-a K=V]... [-l K=V]...}
    shift 2
    local args=() handler=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --runtime) handler=${2:?--runtime needs a handler name}; shift 2 ;;
            *) args+=("$1"); shift ;;
        esac
    done
    mkdir -p "$work/specs"
    e2e_pod_json "$work" "$name" "${args[@]}" >"$work/specs/pod-name-$name.json" || return 1
    e2e_runp "$work" "$work/specs/pod-name-$name.json" "$handler"
}

# container-json WORK NAME [-a K=V]... [-l K=V]... [-e K=V]... [-i IMAGE] [-- CMD...]:
# print a ContainerConfig JSON; default command: sleep 3600.
e2e_container_json() {
    local work=${1:?usage: container-json WORK NAME [opts] [-- CMD...]}
    local name=${2:?usage: container-json WORK NAME [opts] [-- CMD...]}
    shift 2
    local E2E_BUSYBOX_IMAGE
    _e2e_work_env "$work" || return 1
    local annos=() labels=() envs=() image=$E2E_BUSYBOX_IMAGE cmd=()
    while [ $# -gt 0 ]; do
        case "$1" in
            -a|--annotation) annos+=("${2:?-a needs KEY=VALUE}"); shift 2 ;;
            -l|--label) labels+=("${2:?-l needs KEY=VALUE}"); shift 2 ;;
            -e|--env) envs+=("${2:?-e needs KEY=VALUE}"); shift 2 ;;
            -i|--image) image=${2:?-i needs IMAGE}; shift 2 ;;
            --) shift; cmd=("$@"); break ;;
            *) _e2e_err "container-json: unknown argument '$1'"; return 1 ;;
        esac
    done
    [ ${#cmd[@]} -gt 0 ] || cmd=(sleep 3600)
    local aj lj ej cj
    aj=$(_e2e_kv_json "${annos[@]}") || return 1
    lj=$(_e2e_kv_json "${labels[@]}") || return 1
    ej=$(_e2e_kv_json "${envs[@]}") || return 1
    cj=$(_e2e_array_json "${cmd[@]}") || return 1
    jq -cn --arg name "$name" --arg image "$image" --argjson annos "$aj" --argjson labels "$lj" \
        --argjson envs "$ej" --argjson cmd "$cj" '{
        metadata: {name: $name, attempt: 0},
        image: {image: $image},
        command: $cmd,
        envs: ($envs | to_entries | map({key: .key, value: .value})),
        labels: $labels,
        annotations: $annos,
        log_path: ($name + ".log"),
        linux: {}
    }'
}

# create WORK POD_ID CONTAINER_JSON_FILE: create (not start); print the id.
e2e_create() {
    local work=${1:?usage: create WORK POD_ID FILE} pod=${2:?usage: create WORK POD_ID FILE}
    local file=${3:?usage: create WORK POD_ID FILE}
    local podjson="$work/specs/pod-$pod.json" id
    [ -f "$podjson" ] || { _e2e_err "no pod config for $pod (pods must come from pod/runp)"; return 1; }
    if ! id=$(e2e_crictl "$work" create --no-pull "$pod" "$file" "$podjson"); then
        _e2e_fail "$work" "crictl create in pod $pod from $file failed"; return 1
    fi
    cp "$file" "$work/specs/ctr-$id.json"
    printf '%s\n' "$id"
}

# start-container WORK CONTAINER_ID
e2e_start_container() {
    local work=${1:?usage: start-container WORK ID} id=${2:?usage: start-container WORK ID}
    e2e_crictl "$work" start "$id" >/dev/null || { _e2e_fail "$work" "crictl start $id failed"; return 1; }
}

# container WORK POD_ID NAME [opts as container-json] [--no-start] [-- CMD...]:
# create and start a busybox container; print its id.
e2e_container() {
    local work=${1:?usage: container WORK POD_ID NAME [opts] [-- CMD...]}
    local pod=${2:?usage: container WORK POD_ID NAME [opts] [-- CMD...]}
    local name=${3:?usage: container WORK POD_ID NAME [opts] [-- CMD...]}
    shift 3
    local args=() start=1
    while [ $# -gt 0 ]; do
        case "$1" in
            --no-start) start=0; shift ;;
            --) args+=("$@"); break ;;
            *) args+=("$1"); shift ;;
        esac
    done
    local file="$work/specs/ctr-name-$name.json" id
    e2e_container_json "$work" "$name" "${args[@]}" >"$file" || return 1
    id=$(e2e_create "$work" "$pod" "$file") || return 1
    if [ "$start" = 1 ]; then
        e2e_start_container "$work" "$id" || return 1
    fi
    printf '%s\n' "$id"
}

# exec WORK CONTAINER_ID CMD...: run CMD in the container (streaming
# crictl exec, no stdin); stdout, stderr and exit status are the command's.
# crictl itself exits 1 with a "command terminated with exit code N" line;
# that line is dropped and N returned. Other crictl errors stay visible.
e2e_exec() {
    local work=${1:?usage: exec WORK ID CMD...} id=${2:?usage: exec WORK ID CMD...}
    shift 2
    local errf rc=0 code=""
    errf=$(mktemp) || return 1
    e2e_crictl "$work" exec "$id" "$@" 2>"$errf" || rc=$?
    local pat='level=fatal msg="execing command in container [0-9a-f]*: command terminated with exit code [0-9][0-9]*"$'
    if [ "$rc" -ne 0 ]; then
        code=$(grep -e "$pat" "$errf" | tail -n 1 | sed 's/.*exit code \([0-9][0-9]*\)"$/\1/')
    fi
    grep -v -e "$pat" "$errf" >&2
    rm -f "$errf"
    if [ -n "$code" ]; then return "$code"; fi
    return "$rc"
}

# inspect WORK ID: JSON of a container (crictl inspect) or pod (inspectp).
e2e_inspect() {
    local work=${1:?usage: inspect WORK ID} id=${2:?usage: inspect WORK ID}
    if [ -f "$work/specs/pod-$id.json" ]; then
        e2e_crictl "$work" inspectp -o json "$id"
    else
        e2e_crictl "$work" inspect -o json "$id"
    fi
}

# rm WORK CONTAINER_ID: stop (timeout 0 s unless NRI_E2E_STOP_TIMEOUT) and remove.
e2e_rm() {
    local work=${1:?usage: rm WORK ID} id=${2:?usage: rm WORK ID}
    if ! { e2e_crictl "$work" stop -t "${NRI_E2E_STOP_TIMEOUT:-0}" "$id" >/dev/null \
            && e2e_crictl "$work" rm "$id" >/dev/null; }; then
        _e2e_fail "$work" "stop/rm container $id failed"; return 1
    fi
}

# rmp WORK POD_ID: stop and remove a pod (and its containers).
e2e_rmp() {
    local work=${1:?usage: rmp WORK ID} id=${2:?usage: rmp WORK ID}
    if ! { e2e_crictl "$work" stopp "$id" >/dev/null && e2e_crictl "$work" rmp "$id" >/dev/null; }; then
        _e2e_fail "$work" "stopp/rmp pod $id failed"; return 1
    fi
    rm -f "$work/specs/pod-$id.json"
}

# ------------------------------------------------------------------ stop

# Pids of this WORK's shims and pre-launched plugins, found by command line.
# One grep over /proc for speed, then an exact check of each candidate (the
# grep itself, which is gone by then, drops out).
_e2e_pids_under() {
    local work=$1 f p cmd
    # shellcheck disable=SC2013  # /proc paths have no spaces
    for f in $(grep -lsaF -e "$work/containerd.sock" -e "$work/nri/plugins/" /proc/[0-9]*/cmdline); do
        p=${f#/proc/}; p=${p%/cmdline}
        case "$p" in "$$"|"$BASHPID"|"$PPID") continue ;; esac
        cmd=$( { tr '\0' ' ' <"$f"; } 2>/dev/null ) || continue
        case "$cmd" in
            *containerd-shim*"$work/containerd.sock"*|*"$work/nri/plugins/"*)
                printf '%s\n' "$p" ;;
        esac
    done
}

_e2e_wait_gone() { # PID TIMEOUT_TENTHS
    local pid=$1 n=${2:-50}
    while [ "$n" -gt 0 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; n=$((n - 1)); done
    ! kill -0 "$pid" 2>/dev/null
}

# stop WORK: remove all pods/containers, stop containerd by PID, kill
# leftover shims, delete runc state, unmount everything under WORK and
# remove this WORK's cgroups. Idempotent; keeps WORK/nri and the logs.
e2e_stop() {
    local work=${1:?usage: stop WORK}
    [ -d "$work" ] || return 0
    work=$(cd "$work" && pwd -P)
    local E2E_CGROUP_PARENT="" E2E_CRICTL="" rc=0
    [ -f "$work/harness.env" ] && _e2e_work_env "$work"
    local pid=""
    [ -f "$work/containerd.pid" ] && pid=$(cat "$work/containerd.pid")

    # 1. Graceful CRI teardown while containerd is alive.
    local crictl=${E2E_CRICTL:-}
    if [ -n "$pid" ] && [ -n "$crictl" ] && kill -0 "$pid" 2>/dev/null && [ -S "$work/containerd.sock" ]; then
        local ids id cc=("$crictl" --config "$work/crictl.yaml" --timeout 10s)
        ids=$(timeout 20 "${cc[@]}" pods -q 2>/dev/null) || true
        for id in $ids; do
            [[ "$id" =~ ^[0-9a-f]{64}$ ]] || continue
            timeout 20 "${cc[@]}" stopp "$id" >/dev/null 2>&1 || true
            timeout 20 "${cc[@]}" rmp -f "$id" >/dev/null 2>&1 || true
        done
    fi

    # 2. containerd by PID.
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        if ! _e2e_wait_gone "$pid" 100; then
            _e2e_log "containerd $pid ignored TERM; killing"
            kill -KILL "$pid" 2>/dev/null || true
            _e2e_wait_gone "$pid" 50 || rc=1
        fi
    fi
    rm -f "$work/containerd.pid"

    # 3. runc state: kill and delete whatever is left.
    local root c
    if [ -d "$work/runc" ] && command -v runc >/dev/null; then
        for root in "$work"/runc/*/; do
            [ -d "$root" ] || continue
            for c in "$root"*/; do
                [ -d "$c" ] || continue
                c=$(basename "$c")
                runc --root "$root" kill "$c" KILL >/dev/null 2>&1 || true
                runc --root "$root" delete -f "$c" >/dev/null 2>&1 || true
            done
        done
    fi

    if [ -d "$work/runc-netdev" ] && [ -x "${NRI_E2E_RUNC_NETDEV:-}" ]; then
        for root in "$work"/runc-netdev/*/; do
            [ -d "$root" ] || continue
            for c in "$root"*/; do
                [ -d "$c" ] || continue
                c=$(basename "$c")
                "$NRI_E2E_RUNC_NETDEV" --root "$root" kill "$c" KILL >/dev/null 2>&1 || true
                "$NRI_E2E_RUNC_NETDEV" --root "$root" delete -f "$c" >/dev/null 2>&1 || true
            done
        done
    fi

    # 4. Leftover shims and pre-launched plugins (command line names WORK).
    local p
    for p in $(_e2e_pids_under "$work"); do kill -TERM "$p" 2>/dev/null || true; done
    for p in $(_e2e_pids_under "$work"); do
        _e2e_wait_gone "$p" 30 || kill -KILL "$p" 2>/dev/null || true
    done

    # 5. Mounts under WORK, deepest first.
    local m
    for _ in 1 2 3; do
        m=$(findmnt -rn -o TARGET | awk -v w="$work/" 'index($0, w) == 1' | sort -r)
        [ -z "$m" ] && break
        while IFS= read -r p; do
            [ -n "$p" ] && { umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true; }
        done <<<"$m"
    done
    if findmnt -rn -o TARGET | awk -v w="$work/" 'index($0, w) == 1' | grep -q .; then
        _e2e_err "mounts left under $work:"; findmnt -rn -o TARGET | grep -F "$work/" >&2; rc=1
    fi

    # 6. This WORK's cgroups (cgroup v1 hierarchies and v2).
    if [ -n "$E2E_CGROUP_PARENT" ]; then
        local d
        for d in /sys/fs/cgroup/*"$E2E_CGROUP_PARENT" /sys/fs/cgroup"$E2E_CGROUP_PARENT"; do
            [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
        done
    fi

    # 7. This WORK's CNI bridge and address leases.
    local br
    br=$(_e2e_bridge "$work")
    if ip link show "$br" >/dev/null 2>&1; then
        ip link del "$br" 2>/dev/null || { _e2e_err "cannot delete bridge $br"; rc=1; }
    fi
    rm -rf "$work/cni/ipam"

    rm -f "$(_e2e_nri_socket_of "$work")"
    rm -f "$work/harness.env" "$work/nri.sock" "$work/containerd.sock" "$work/containerd.sock.ttrpc"
    return $rc
}

# wait-log WORK ERE [TIMEOUT_S]: wait until containerd's log has a line
# matching the extended regex (default timeout 10 s); print that line.
e2e_wait_log() {
    local work=${1:?usage: wait-log WORK ERE [TIMEOUT_S]} re=${2:?usage: wait-log WORK ERE [TIMEOUT_S]}
    local t=${3:-10} deadline line
    deadline=$(( $(date +%s%N) / 1000000 + t * 1000 ))
    while :; do
        line=$(grep -E -m1 -e "$re" "$work/containerd.log" 2>/dev/null) && { printf '%s\n' "$line"; return 0; }
        if [ $(( $(date +%s%N) / 1000000 )) -ge "$deadline" ]; then
            _e2e_fail "$work" "no containerd log line matching /$re/ within ${t}s"; return 1
        fi
        sleep 0.1
    done
}

# status WORK: exit 0 if WORK's containerd is running.
e2e_status() {
    local work=${1:?usage: status WORK}
    [ -f "$work/containerd.pid" ] && kill -0 "$(cat "$work/containerd.pid")" 2>/dev/null
}

# env WORK: print shell assignments describing a started WORK.
e2e_env() {
    local work=${1:?usage: env WORK}
    local E2E_BINDIR E2E_VERSION E2E_CRICTL E2E_CGROUP_PARENT E2E_PAUSE_IMAGE E2E_BUSYBOX_IMAGE
    _e2e_work_env "$work" || return 1
    cat <<EOF
NRI_E2E_WORK=$work
NRI_E2E_CONTAINERD_VERSION=$E2E_VERSION
NRI_E2E_BINDIR=$E2E_BINDIR
NRI_E2E_CONTAINERD_PID=$(cat "$work/containerd.pid" 2>/dev/null)
NRI_E2E_CONTAINERD_SOCKET=$work/containerd.sock
NRI_E2E_NRI_SOCKET=$(_e2e_nri_socket_of "$work")
NRI_E2E_PLUGIN_PATH=$work/nri/plugins
NRI_E2E_PLUGIN_CONFIG_PATH=$work/nri/conf.d
NRI_E2E_CONTAINERD_LOG=$work/containerd.log
NRI_E2E_CRICTL_CONFIG=$work/crictl.yaml
NRI_E2E_CGROUP_PARENT=$E2E_CGROUP_PARENT
NRI_E2E_PAUSE_IMAGE=$E2E_PAUSE_IMAGE
NRI_E2E_BUSYBOX_IMAGE=$E2E_BUSYBOX_IMAGE
EOF
}

# ------------------------------------------------------------------ CLI

_e2e_usage() {
    cat >&2 <<'EOF'
usage: tests/e2e/harness.sh SUBCOMMAND ARGS...
  available                         exit 0 if the harness can run here
  versions                          known containerd versions (2.1, 2.3, 2.4)
  bindir VERSION                    bin dir of containerd VERSION
  start VERSION WORK                start containerd (2.1|2.3|2.4|bindir) under WORK
  stop WORK                         tear everything down (idempotent)
  restart WORK                      restart containerd alone (pods keep running)
  status WORK                       exit 0 if containerd is running
  env WORK                          print KEY=VALUE paths of a started WORK
  logs WORK [LINES]                 log locations and containerd log tail
  wait-log WORK ERE [TIMEOUT_S]     wait for a containerd log line matching ERE
  pod WORK NAME [-a K=V] [-l K=V] [--netns] [--runtime H]
                                    run a pod (host network unless --netns), print id
  pod-json WORK NAME [...]          print the pod JSON pod would use
  runp WORK FILE [HANDLER]          run a pod from JSON, print id
  container WORK POD NAME [-a K=V] [-l K=V] [-e K=V] [-i IMG] [--no-start] [-- CMD...]
                                    create+start a container, print id
  container-json WORK NAME [...]    print the container JSON container would use
  create WORK POD FILE              create a container from JSON, print id
  start-container WORK ID           start a created container
  exec WORK ID CMD...               run CMD in the container (exit code kept)
  inspect WORK ID                   crictl inspect/inspectp JSON
  rm WORK ID                        stop and remove a container
  rmp WORK ID                       stop and remove a pod
  crictl WORK ARGS...               raw crictl against WORK
  ctr WORK ARGS...                  raw ctr (namespace k8s.io) against WORK
EOF
}

_e2e_main() {
    local cmd=${1:-}
    [ -n "$cmd" ] || { _e2e_usage; return 2; }
    shift
    local fn="e2e_${cmd//-/_}"
    if ! declare -F "$fn" >/dev/null; then
        _e2e_err "unknown subcommand '$cmd'"; _e2e_usage; return 2
    fi
    "$fn" "$@"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    _e2e_main "$@"
    exit $?
fi
