#!/usr/bin/env bash
# The declared rust-version (root Cargo.toml) builds: every published crate
# (libraries and programs, the dependencies of Cargo.lock included) is
# type-checked with that toolchain, which catches what clippy's
# incompatible_msrv lint cannot see (language features, Cargo features,
# dependencies that need a newer compiler).
#
#   bash scripts/msrv-check.sh
#
# The toolchain comes from rustup (minimal profile). Where it cannot be
# installed (no access to the Rust distribution server) the check says so
# and passes: the rust-version then rests on clippy's incompatible_msrv
# lint, which CI runs with -D warnings.
#
# Cost: the toolchain download once (kept by rustup), and one type-check
# of the published crates and their dependencies in a target dir of its
# own under ${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs (2 min 4 s of CPU from
# scratch, measured; seconds when cached).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs
MSRV=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
if [ -z "$MSRV" ]; then
  echo "msrv: no rust-version in Cargo.toml" >&2
  exit 1
fi
if ! cargo "+$MSRV" --version >/dev/null 2>&1; then
  if ! rustup toolchain install "$MSRV" --profile minimal >"$CACHE/msrv-install.log" 2>&1; then
    echo "msrv: the Rust $MSRV toolchain cannot be installed here (see $CACHE/msrv-install.log):"
    echo "msrv: skipped; rust-version $MSRV rests on clippy's incompatible_msrv lint"
    exit 0
  fi
fi
mapfile -t CRATES < <(cargo xtask release-check --order)
args=()
for c in "${CRATES[@]}"; do args+=(-p "$c"); done
echo "msrv: cargo +$MSRV check of ${CRATES[*]}"
CARGO_TARGET_DIR="$CACHE/msrv-target" cargo "+$MSRV" check --locked -q "${args[@]}"
echo "msrv: the published crates build with Rust $MSRV (rust-version)"
