#!/usr/bin/env bash
# Runs every cargo-fuzz target for N seconds (default 20), each with a
# memory and a time limit: a run fails when an input makes the process
# grow over -rss_limit_mb, allocate more than -malloc_limit_mb at once, or
# take longer than -timeout seconds. Needs the nightly toolchain; installs
# cargo-fuzz if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: no nightly toolchain here; cannot run cargo-fuzz" >&2
  exit 1
fi
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
cd fuzz
# Fuzz builds stay out of the shared target dir (different flags).
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/fuzz-target}
for t in $(cargo +nightly fuzz list); do
  # Limits per target: the protocol decoders take whole 4 MiB messages;
  # the annotation decoders are bounded far lower (one decoding peaks at
  # a few MiB, see plugins/common/README.md), with inputs up to 64 KiB so
  # that aliases and nesting reach their bounds.
  case "$t" in
    annotations) limits=(-rss_limit_mb=512 -malloc_limit_mb=64 -timeout=10 -max_len=65536) ;;
    *) limits=(-rss_limit_mb=2048 -timeout=30) ;;
  esac
  echo "fuzz: $t for ${secs}s (${limits[*]})"
  mkdir -p "corpus/$t"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" "${limits[@]}" 2>&1 | tail -n 3
done
