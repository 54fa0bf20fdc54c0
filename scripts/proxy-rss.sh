#!/usr/bin/env bash
# Peak RSS of nri-proxy with N copies of a WebAssembly plugin behind it:
# the number docs/proxy.md sizes the DaemonSet's memory limit with.
#
#   bash scripts/proxy-rss.sh PROXY_BINARY GUEST_WASM N [OBJECTS]
#
# Starts containerd/nri's Go runtime (nri-go-runtime from $NRI_INTEROP_BIN,
# default <repo>/interop/bin; bash scripts/build-go-peers.sh builds it and
# the Go-built guest wasm-guest.wasm), gives it OBJECTS pods with a running
# container each (default 1000), starts the proxy with N copies of
# GUEST_WASM in its plugin directory (so the proxy and every guest are
# synchronized with those), runs 100 more pods and containers through
# them, stops, and prints the proxy's peak RSS (GNU time's %M, KiB).
# KEEP=1 keeps the temporary directory (the proxy's and the runtime's logs).
set -euo pipefail
proxy=$1 guest=$2 n=$3 objects=${4:-1000}
bin=${NRI_INTEROP_BIN:-$(cd "$(dirname "$0")/.." && pwd)/interop/bin}
[[ -x $bin/nri-go-runtime ]] || { echo "no $bin/nri-go-runtime: bash scripts/build-go-peers.sh" >&2; exit 1; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
[[ -n ${KEEP:-} ]] && trap 'echo kept $d' EXIT
mkdir -p "$d/plugins"
for i in $(seq 1 "$n"); do cp "$guest" "$d/plugins/$((10 + i))-guest$i.wasm"; done
cat >"$d/config.yaml" <<EOC
socket-path: $d/proxy.sock
plugin-dir: $d/plugins
disable-launch: false
request-timeout: 20s
registration-timeout: 60s
proxy:
  name: proxy
  index: "50"
  upstream-socket: $d/nri.sock
EOC
coproc GO { exec "$bin/nri-go-runtime" --socket "$d/nri.sock" 2>"$d/go.log"; }
exec 3>&"${GO[1]}" 4<&"${GO[0]}"
while read -r line <&4; do [[ $line == *'"started"'* ]] && break; done
id=0
cmd() {
  id=$((id + 1))
  echo "{\"id\":$id,$1}" >&3
  while read -r line <&4; do
    [[ $line == *"\"id\":$id,"* || $line == *"\"id\":$id}"* ]] && break
  done
}
pods() {
  for p in $(seq 1 "$2"); do
    cmd "\"cmd\":\"RunPodSandbox\",\"pod\":{\"id\":\"$1p$p\",\"name\":\"$1p$p\"}"
    cmd "\"cmd\":\"CreateContainer\",\"pod_id\":\"$1p$p\",\"container\":{\"id\":\"$1c$p\",\"pod_sandbox_id\":\"$1p$p\",\"name\":\"c$p\"}"
    cmd "\"cmd\":\"StartContainer\",\"container_id\":\"$1c$p\""
  done
}
pods a "$objects"
/usr/bin/time -f '%M' -o "$d/rss" "$proxy" --config "$d/config.yaml" 2>"$d/proxy.log" &
timer=$!
sleep 1
kill -0 "$timer" 2>/dev/null || { cat "$d/proxy.log" "$d/rss" >&2; exit 1; }
cmd '"cmd":"wait_plugins","count":1,"timeout_ms":600000'
until grep -q 'plugin side started' "$d/proxy.log"; do sleep 0.5; done
pods b 100
cmd '"cmd":"stop"'
kill -TERM "$(pgrep -P "$timer")"
wait "$timer" || true
echo "nri-proxy with $n WebAssembly plugin(s), $objects + 100 pods: peak RSS $(tail -1 "$d/rss") KiB"
