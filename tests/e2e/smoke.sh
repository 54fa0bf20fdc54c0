#!/usr/bin/env bash
# Smoke test of the e2e harness: for each containerd version (default: all
# the harness knows), start containerd with NRI, check NRI is up, that a
# pre-launched plugin executable is started with NRI_PLUGIN_SOCKET=3, run a
# host-network pod and a busybox container, exec into it, inspect it, and
# tear everything down cleanly.
#
#   tests/e2e/smoke.sh [VERSION...]      e.g. tests/e2e/smoke.sh 2.1 2.3
#
# Exits 0 on success; on failure prints the containerd log tail, keeps the
# WORK dir for inspection and exits 1. Exits 77 (skip) if the harness is not
# available (not root / scripts/setup-e2e.sh not run) unless
# NRI_E2E_REQUIRE=1, then it fails.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/harness.sh
. "$here/harness.sh"

if ! e2e_available; then
    if [ "${NRI_E2E_REQUIRE:-0}" = 1 ]; then
        echo "smoke: harness unavailable and NRI_E2E_REQUIRE=1" >&2; exit 1
    fi
    echo "smoke: SKIP (harness unavailable)" >&2; exit 77
fi

versions=("$@")
[ ${#versions[@]} -gt 0 ] || mapfile -t versions < <(e2e_versions)

WORK=""
fail() {
    echo "smoke[$V]: FAIL: $*" >&2
    [ -n "$WORK" ] && e2e_logs "$WORK" 60
    [ -n "$WORK" ] && e2e_stop "$WORK"
    echo "smoke[$V]: WORK kept for inspection: $WORK" >&2
    exit 1
}
step() { echo "smoke[$V]: $*" >&2; }

run_one() {
    local t0 t1
    t0=$(_e2e_now)
    WORK=$(mktemp -d /tmp/nri-e2e.XXXXXX)

    # A pre-launched "plugin": records how containerd started it, then exits
    # (so it never registers; containerd just logs that).
    mkdir -p "$WORK/nri/plugins"
    cat >"$WORK/nri/plugins/05-probe" <<EOF
#!/bin/sh
{
    echo "NRI_PLUGIN_NAME=\$NRI_PLUGIN_NAME"
    echo "NRI_PLUGIN_IDX=\$NRI_PLUGIN_IDX"
    echo "NRI_PLUGIN_SOCKET=\$NRI_PLUGIN_SOCKET"
    echo "fd3=\$(readlink /proc/self/fd/3)"
} >"$WORK/probe.marker.tmp"
mv "$WORK/probe.marker.tmp" "$WORK/probe.marker"
EOF
    chmod +x "$WORK/nri/plugins/05-probe"

    step "start containerd $V in $WORK"
    e2e_start "$V" "$WORK" || fail "start"
    t1=$(_e2e_now)
    local ver
    ver=$(e2e_env "$WORK" | sed -n 's/^NRI_E2E_CONTAINERD_VERSION=//p')
    step "containerd $ver started in $(_e2e_since "$t0") s"

    [ -S "$WORK/nri.sock" ] || fail "NRI socket $WORK/nri.sock missing"
    grep -q 'Registered namespace \\"k8s.io\\" with NRI\|Registered namespace "k8s.io" with NRI' \
        "$WORK/containerd.log" || fail "containerd log does not say NRI registered k8s.io"

    # The probe runs at NRI start-up; give it a moment.
    for _ in $(seq 50); do [ -f "$WORK/probe.marker" ] && break; sleep 0.1; done
    [ -f "$WORK/probe.marker" ] || fail "pre-launched plugin 05-probe was not started"
    grep -qx 'NRI_PLUGIN_SOCKET=3' "$WORK/probe.marker" || fail "probe: NRI_PLUGIN_SOCKET != 3: $(cat "$WORK/probe.marker")"
    grep -qx 'NRI_PLUGIN_NAME=probe' "$WORK/probe.marker" || fail "probe: bad NRI_PLUGIN_NAME: $(cat "$WORK/probe.marker")"
    grep -qx 'NRI_PLUGIN_IDX=05' "$WORK/probe.marker" || fail "probe: bad NRI_PLUGIN_IDX: $(cat "$WORK/probe.marker")"
    grep -q '^fd3=socket:' "$WORK/probe.marker" || fail "probe: fd 3 is not a socket: $(cat "$WORK/probe.marker")"
    step "pre-launched probe ran: $(tr '\n' ' ' <"$WORK/probe.marker")"

    local pod ctr out
    pod=$(e2e_pod "$WORK" smoke -a nri-e2e.test/pod=yes) || fail "pod"
    ctr=$(e2e_container "$WORK" "$pod" hello -a nri-e2e.test/ctr=yes -e SMOKE_VAR=smoke-value \
        -- sh -c 'echo hello; sleep 3600') || fail "container"
    step "pod $pod, container $ctr"

    out=$(e2e_exec "$WORK" "$ctr" cat /proc/self/status) || fail "exec cat /proc/self/status"
    grep -q '^Name:[[:space:]]*cat' <<<"$out" || fail "unexpected /proc/self/status: $out"
    out=$(e2e_exec "$WORK" "$ctr" env) || fail "exec env"
    grep -qx 'SMOKE_VAR=smoke-value' <<<"$out" || fail "env lacks SMOKE_VAR: $out"
    local rc=0
    e2e_exec "$WORK" "$ctr" sh -c 'exit 3' || rc=$?
    [ "$rc" = 3 ] || fail "exec exit status not propagated (got $rc, want 3)"

    local logf="$WORK/logs/pods/smoke/hello.log"
    for _ in $(seq 50); do grep -q 'hello' "$logf" 2>/dev/null && break; sleep 0.1; done
    grep -q ' stdout F hello$' "$logf" || fail "container log $logf lacks hello"

    local insp
    insp=$(e2e_inspect "$WORK" "$ctr") || fail "inspect"
    # CRI annotations are in the CRI status (and what NRI plugins see); the
    # OCI spec only carries allow-listed ones plus CRI's own.
    [ "$(jq -r '.status.annotations["nri-e2e.test/ctr"]' <<<"$insp")" = yes ] \
        || fail "annotation missing from the container status"
    [ "$(jq -r '.info.runtimeSpec.annotations["io.kubernetes.cri.container-name"]' <<<"$insp")" = hello ] \
        || fail "OCI spec lacks io.kubernetes.cri.container-name=hello"
    jq -e '.info.runtimeSpec.process.env | index("SMOKE_VAR=smoke-value")' <<<"$insp" >/dev/null \
        || fail "env missing from the OCI spec"
    [ "$(jq -r .status.state <<<"$insp")" = CONTAINER_RUNNING ] || fail "container not running"
    insp=$(e2e_inspect "$WORK" "$pod") || fail "inspectp"
    [ "$(jq -r .status.state <<<"$insp")" = SANDBOX_READY ] || fail "pod not ready"

    e2e_rm "$WORK" "$ctr" || fail "rm"
    e2e_rmp "$WORK" "$pod" || fail "rmp"

    # Leave something running for stop to clean up.
    pod=$(e2e_pod "$WORK" leftover) || fail "pod leftover"
    e2e_container "$WORK" "$pod" busy >/dev/null || fail "container leftover"

    local t2
    t2=$(_e2e_now)
    local pid
    pid=$(cat "$WORK/containerd.pid")
    e2e_stop "$WORK" || fail "stop"
    kill -0 "$pid" 2>/dev/null && fail "containerd $pid still running after stop"
    findmnt -rn -o TARGET | grep -qF "$WORK/" && fail "mounts left under $WORK"
    pgrep -f "containerd-shim.*$WORK/" >/dev/null && fail "shim left running"
    e2e_stop "$WORK" || fail "second stop"
    step "stop took $(_e2e_since "$t2") s"

    rm -rf "$WORK"
    step "PASS in $(_e2e_since "$t0") s (start $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}') s)"
    WORK=""
}

for V in "${versions[@]}"; do
    run_one
done
echo "smoke: all passed (${versions[*]})" >&2
