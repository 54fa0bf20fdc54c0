#!/usr/bin/env bash
# Runs every cargo-fuzz target for N seconds (default 20). Needs the nightly
# toolchain; installs cargo-fuzz if missing.
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
  echo "fuzz: $t for ${secs}s"
  mkdir -p "corpus/$t"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | tail -n 3
done
