#!/usr/bin/env bash
# Build every Go interop program (interop/cmd/..., and interop/legacy/... when
# that nested module exists) into $NRI_INTEROP_BIN (default <repo>/interop/bin),
# and the WebAssembly guest interop/wasm-guest into wasm-guest.wasm there.
#
# Quiet on success; on failure prints the Go output and exits non-zero.
# Idempotent and fast: when no *.go/go.mod/go.sum file under interop, the Go
# version or the settings changed since the last successful run (recorded in
# $NRI_INTEROP_BIN/.build-go-peers.stamp) it does not run Go at all;
# otherwise it rebuilds through the Go build cache, and binaries whose bytes
# did not change keep their mtime.
#
# Environment:
#   NRI_INTEROP_BIN   output directory (created if missing)
#   GOCACHE, GOMODCACHE
#                     used as given; when unset they default to
#                     ${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/go/{build,mod}
#   GO                the go binary (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
INTEROP=$ROOT/interop
BIN=${NRI_INTEROP_BIN:-$INTEROP/bin}

die() {
	echo "build-go-peers: $*" >&2
	exit 1
}

# shellcheck source=lib/go-env.sh
source "$ROOT/scripts/lib/go-env.sh"

mkdir -p "$BIN"
BIN=$(cd "$BIN" && pwd)

# Fast path: skip Go entirely when no source, module file, toolchain or
# setting changed since the last successful build and every binary it
# produced is still there.
STAMP_FILE=$BIN/.build-go-peers.stamp
stamp() {
	"$GO" version
	echo "$GOFLAGS $CGO_ENABLED $GOMODCACHE"
	(cd "$INTEROP" && find . -path ./bin -prune -o -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 |
		LC_ALL=C sort -z | xargs -0 -r sha256sum)
	# The scripts that do the building count too.
	(cd "$ROOT/scripts" && sha256sum build-go-peers.sh build-wasm-guest.sh lib/go-env.sh)
}
STAMP=$(stamp | sha256sum | cut -d' ' -f1)
if [[ -f $STAMP_FILE ]]; then
	up_to_date=1
	{ read -r old_stamp && [[ $old_stamp == "$STAMP" ]]; } <"$STAMP_FILE" || up_to_date=0
	if ((up_to_date)); then
		while read -r b; do
			[[ -x $BIN/$b ]] || up_to_date=0
		done < <(tail -n +2 "$STAMP_FILE")
	fi
	((up_to_date)) && exit 0
fi
rm -f "$STAMP_FILE"
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/nri-go-peers.XXXXXX")
LOG=$STAGE/log
trap 'rm -rf "$STAGE"' EXIT

# build MODULE_DIR: build the module's main packages into $STAGE/out.
build() {
	local mod=$1 pkgs
	if ! pkgs=$(cd "$mod" && "$GO" list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./... 2>"$LOG"); then
		cat "$LOG" >&2
		die "listing packages in ${mod#"$ROOT"/} failed"
	fi
	[[ -n $pkgs ]] || return 0
	# shellcheck disable=SC2086 # one import path per word
	if ! (cd "$mod" && "$GO" build -trimpath -o "$STAGE/out/" $pkgs) >"$LOG" 2>&1; then
		cat "$LOG" >&2
		die "go build in ${mod#"$ROOT"/} failed"
	fi
}

mkdir -p "$STAGE/out"
build "$INTEROP"
MAIN_BINS=$(ls "$STAGE/out")
if [[ -f $INTEROP/legacy/go.mod ]]; then
	mkdir -p "$STAGE/main" && mv "$STAGE"/out/* "$STAGE/main/" 2>/dev/null || true
	build "$INTEROP/legacy"
	for b in $MAIN_BINS; do
		[[ ! -e $STAGE/out/$b ]] || die "program name $b exists in both interop and interop/legacy"
	done
	mv "$STAGE"/main/* "$STAGE/out/" 2>/dev/null || true
fi

# The WebAssembly guest (its own module): a .wasm built with the standard
# toolchain (scripts/build-wasm-guest.sh, which plugin authors use too).
if [[ -f $INTEROP/wasm-guest/go.mod ]]; then
	GO=$GO bash "$ROOT/scripts/build-wasm-guest.sh" "$INTEROP/wasm-guest" "$STAGE/out/wasm-guest.wasm"
fi

# Install: replace only binaries whose bytes changed.
built=()
for f in "$STAGE"/out/*; do
	[[ -e $f ]] || continue
	name=$(basename "$f")
	built+=("$name")
	dst=$BIN/$name
	if [[ -f $dst ]] && cmp -s "$f" "$dst"; then
		continue
	fi
	mv -f "$f" "$dst"
done
{
	echo "$STAMP"
	printf '%s\n' "${built[@]}"
} >"$STAMP_FILE"
