#!/usr/bin/env bash
# Build one Go NRI plugin for WebAssembly: a Go module whose main package
# registers its plugin with containerd/nri's pkg/api (api.RegisterPlugin),
# built with the standard Go toolchain the way containerd/nri builds its own
# WebAssembly plugins:
#
#   GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
#
# Usage: build-wasm-guest.sh MODULE_DIR OUT_FILE
#
# OUT_FILE is written only when the build succeeds, and made executable (a
# plugin in a runtime's plugin directory must be). Quiet on success; on
# failure prints Go's output and exits non-zero.
#
# Environment: GO, GOCACHE, GOMODCACHE as scripts/lib/go-env.sh says.
set -euo pipefail

die() {
	echo "build-wasm-guest: $*" >&2
	exit 1
}

[[ $# -eq 2 ]] || die "usage: build-wasm-guest.sh MODULE_DIR OUT_FILE"
MOD=$1
OUT=$2
[[ -f $MOD/go.mod ]] || die "$MOD has no go.mod"

# shellcheck source=lib/go-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-env.sh"
# A WebAssembly guest is built without cgo, whatever the caller's setting.
export CGO_ENABLED=0
mkdir -p "$(dirname "$OUT")"

TMP=$(mktemp "$(dirname "$OUT")/.build-wasm-guest.XXXXXX")
LOG=$(mktemp "${TMPDIR:-/tmp}/build-wasm-guest.log.XXXXXX")
trap 'rm -f "$TMP" "$LOG"' EXIT
OUT_ABS=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
TMP_ABS=$(cd "$(dirname "$TMP")" && pwd)/$(basename "$TMP")
if ! (cd "$MOD" && GOOS=wasip1 GOARCH=wasm "$GO" build -trimpath \
	-buildmode=c-shared -o "$TMP_ABS" .) >"$LOG" 2>&1; then
	cat "$LOG" >&2
	die "go build in $MOD (GOOS=wasip1 GOARCH=wasm) failed"
fi
chmod 0755 "$TMP_ABS"
mv -f "$TMP_ABS" "$OUT_ABS"
