#!/usr/bin/env bash
# Build critest (kubernetes-sigs/cri-tools), the CRI validation suite whose
# NRI cases tests/e2e/tests/critest runs beside `nri conformance`.
# Idempotent: built once into the e2e cache and reused (a second run takes
# well under a second).
#
# critest is a Go test binary: `go test -c ./cmd/critest`, from the module
# source (the Go module proxy serves it; `go install` cannot build a test
# binary), CGO off, version stamped as the upstream Makefile does.
#
# Environment (all optional):
#   NRI_E2E_CACHE           cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/e2e)
#   NRI_E2E_CRITEST_VERSION default v1.37.0 (the first release with NRI cases)
# Prints the binary's path on stdout.
set -euo pipefail

VERSION=${NRI_E2E_CRITEST_VERSION:-v1.37.0}
CACHE=${NRI_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/e2e}
MOD=sigs.k8s.io/cri-tools
DIR="$CACHE/critest-$VERSION"

log() { printf '[setup-critest] %s\n' "$*" >&2; }
die() { printf '[setup-critest] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go is not installed"
want="$MOD@$VERSION ./cmd/critest"
if [ -f "$DIR/.stamp" ] && [ "$(cat "$DIR/.stamp")" = "$want" ] && [ -x "$DIR/bin/critest" ]; then
    log "cached: $DIR"
    echo "$DIR/bin/critest"
    exit 0
fi
mkdir -p "$CACHE"
t0=$(date +%s)
tmp="$DIR.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT
log "building $MOD@$VERSION critest -> $DIR (minutes the first time)"
src=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$MOD@$VERSION" | jq -r .Dir) || src=""
[ -n "$src" ] && [ -d "$src" ] || die "go mod download $MOD@$VERSION failed"
cp -r "$src" "$tmp/src"
chmod -R u+w "$tmp/src"
(cd "$tmp/src" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" \
    go test -c -trimpath -o "$tmp/bin/critest" \
    -ldflags "-X $MOD/pkg/version.Version=$VERSION" ./cmd/critest >&2) \
    || die "building critest failed"
rm -rf "$tmp/src"
printf '%s' "$want" >"$tmp/.stamp"
rm -rf "$DIR"; mv "$tmp" "$DIR"
trap - EXIT
log "built $DIR in $(( $(date +%s) - t0 )) s"
echo "$DIR/bin/critest"
