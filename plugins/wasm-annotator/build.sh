#!/usr/bin/env bash
# Build the sample WebAssembly plugin with the standard Go toolchain
# (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, through the
# repository's scripts/build-wasm-guest.sh).
#
# Usage: plugins/wasm-annotator/build.sh [OUT_FILE]
#   OUT_FILE defaults to wasm-annotator.wasm beside this script.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec bash "$HERE/../../scripts/build-wasm-guest.sh" "$HERE" "${1:-$HERE/wasm-annotator.wasm}"
