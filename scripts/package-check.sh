#!/usr/bin/env bash
# The library crates as they would be published, and a plugin crate that
# depends on them by version from outside this repository:
#
# 1. `cargo package` of every crate a plugin or a runtime depends on
#    (`--no-verify`: cargo 1.95's verification of several packages at
#    once can wait forever on its own artifact-directory lock; the build
#    below verifies instead);
# 2. the packaged crates are unpacked into a scratch workspace outside the
#    repository, with `[patch.crates-io]` pointing their dependencies on
#    each other at the unpacked sources, together with an unchanged copy
#    of plugins/template (which depends on `nri-plugin = "0.1"`); the
#    whole scratch workspace is built, the template's tests run and its
#    binary answers `-help`.
#
#   bash scripts/package-check.sh            # uses $CARGO_TARGET_DIR
#
# Measured: 11 minutes wall (2 minutes of CPU) on a loaded 2-core machine
# with a warm target dir (the packaged crates are compiled once more from
# their unpacked sources); budget 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}

# Every crate a plugin or a runtime pulls in.
CRATES=(nri-api nri-mux nri-ttrpc nri-plugin-macros nri-plugin nri-merge nri-runtime nri-oci)

pkg_args=()
for c in "${CRATES[@]}"; do pkg_args+=(-p "$c"); done
echo "==> cargo package ${CRATES[*]}"
cargo package --no-verify --allow-dirty "${pkg_args[@]}"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/crates"
{
  echo '[workspace]'
  echo 'resolver = "3"'
  echo 'members = ["crates/*", "my-plugin"]'
  echo
  echo '[patch.crates-io]'
} >"$WORK/Cargo.toml"
for c in "${CRATES[@]}"; do
  file=$(ls "$CARGO_TARGET_DIR"/package/"$c"-[0-9]*.crate | sort -V | tail -n 1)
  tar -xzf "$file" -C "$WORK/crates"
  echo "$c = { path = \"crates/$(basename "$file" .crate)\" }" >>"$WORK/Cargo.toml"
done
cp -r plugins/template "$WORK/my-plugin"
if grep -nE "^[A-Za-z0-9_-]+ *= *\{[^}]*\bpath *=" "$WORK/my-plugin/Cargo.toml"; then
  echo "error: plugins/template/Cargo.toml has a path dependency" >&2
  exit 1
fi

echo "==> the packaged crates and a plugin crate outside the repository (a copy of plugins/template)"
(
  cd "$WORK"
  cargo build --workspace
  cargo test -p nri-template
  "$CARGO_TARGET_DIR/debug/template" -help >/dev/null
)
echo "ok: packaged ${#CRATES[@]} crates; they and a plugin outside the repository build from the packages"
