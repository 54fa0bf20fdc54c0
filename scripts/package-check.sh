#!/usr/bin/env bash
# The library crates as they would be published, and a plugin crate that
# depends on them by version from outside this repository:
#
# 1. `cargo package` of every crate a plugin or a runtime depends on
#    (`--no-verify`: cargo 1.95's verification of several packages at
#    once can wait forever on its own artifact-directory lock; the steps
#    below verify instead, more cheaply);
# 2. the packaged crates are unpacked into a scratch workspace outside the
#    repository, with `[patch.crates-io]` pointing their dependencies on
#    each other at the unpacked sources and this repository's Cargo.lock
#    (the same dependency versions, so the shared target dir's compiled
#    dependencies are reused); the runtime-side crates, which no plugin
#    pulls in, are type-checked from their packaged sources;
# 3. an unchanged copy of plugins/template (it depends on
#    `nri-plugin = "0.1"`) joins the scratch workspace: it is built on the
#    packaged crates, its tests run and its binary answers `-help`;
# 4. two plugin crates written by `nri new plugin` (the default, and one
#    with every event) join the scratch workspace the same way, are
#    rustfmt-clean as written, are built, and their own scenarios pass
#    `nri sim` unchanged.
#
#   bash scripts/package-check.sh            # uses $CARGO_TARGET_DIR
#
# Budget: 10 minutes wall on a loaded 2-core machine (it prints its
# elapsed time). Measured with the dependencies already compiled for the
# repository's own build: 6 min 46 s wall, 2 min 11 s of CPU, at a load
# average of 14 on 2 cores (about 4 minutes of it type-checking the
# runtime side's dependencies, whose features differ from the workspace's
# unified ones); the CPU time is what it costs on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
START=$SECONDS

# Every crate a plugin or a runtime pulls in.
CRATES=(nri-api nri-mux nri-ttrpc nri-plugin-macros nri-plugin nri-merge nri-runtime nri-oci)
# Of those, the ones no plugin depends on: type-checked only.
RUNTIME_SIDE=(nri-merge nri-runtime nri-oci)

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
  echo 'members = ["crates/*", "my-plugin", "my-scaffold", "my-scaffold-all"]'
  echo
  echo '[patch.crates-io]'
} >"$WORK/Cargo.toml"
for c in "${CRATES[@]}"; do
  file=$(ls "$CARGO_TARGET_DIR"/package/"$c"-[0-9]*.crate | sort -V | tail -n 1)
  tar -xzf "$file" -C "$WORK/crates"
  echo "$c = { path = \"crates/$(basename "$file" .crate)\" }" >>"$WORK/Cargo.toml"
done
# The unpacked files keep the archive's fixed timestamps, and cargo finds
# the packages' earlier builds in the shared target dir under the same
# names: without a fresh mtime it would take a stale build of a changed
# crate as up to date (it did: a runtime built against last run's nri-api).
find "$WORK/crates" -type f -exec touch {} +
cp "$REPO/Cargo.lock" "$WORK/Cargo.lock"
cp -r plugins/template "$WORK/my-plugin"
if grep -nE "^[A-Za-z0-9_-]+ *= *\{[^}]*\bpath *=" "$WORK/my-plugin/Cargo.toml"; then
  echo "error: plugins/template/Cargo.toml has a path dependency" >&2
  exit 1
fi

echo "==> nri new plugin: my-scaffold (default events), my-scaffold-all (every event)"
cargo build -q -p nri-cli
NRI=$CARGO_TARGET_DIR/debug/nri
"$NRI" new plugin my-scaffold --dir "$WORK/my-scaffold"
"$NRI" new plugin my-scaffold-all --events all --index 60 --dir "$WORK/my-scaffold-all"

check_args=()
for c in "${RUNTIME_SIDE[@]}"; do check_args+=(-p "$c"); done
echo "==> the packaged runtime-side crates compile from their packages (${RUNTIME_SIDE[*]})"
(cd "$WORK" && cargo check --lib "${check_args[@]}")

echo "==> plugin crates outside the repository (plugins/template, the scaffolds) on the packaged crates"
(
  cd "$WORK"
  cargo fmt --check -p my-scaffold -p my-scaffold-all
  cargo build -p nri-template -p my-scaffold -p my-scaffold-all
  cargo test -p nri-template
  "$CARGO_TARGET_DIR/debug/template" -help >/dev/null
  for p in my-scaffold my-scaffold-all; do
    "$NRI" sim "$p/scenario.yaml" --plugin-path "$p=$CARGO_TARGET_DIR/debug/$p"
  done
)
echo "ok: packaged ${#CRATES[@]} crates; they, the template and two scaffolded plugins build from the packages; the scaffolds pass nri sim"
echo "elapsed: $((SECONDS - START)) s (budget 600 s)"
