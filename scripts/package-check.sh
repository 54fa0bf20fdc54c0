#!/usr/bin/env bash
# The dry run of a release (docs/dev/RELEASING.md): the crates as they
# would be published, and a plugin crate that depends on them by version
# from outside this repository:
#
# 1. `cargo xtask release-check`: versions, crates.io metadata, LICENSE
#    and README of every published crate, the publish order, CHANGELOG.md;
# 2. `cargo package` of every published crate, in publish order
#    (`--no-verify`: cargo 1.95's verification of several packages at
#    once can wait forever on its own artifact-directory lock; the steps
#    below verify instead, more cheaply); each package must hold its
#    LICENSE and README.md;
# 3. the packaged crates are unpacked into a scratch workspace outside the
#    repository, with `[patch.crates-io]` pointing their dependencies on
#    each other at the unpacked sources (what `cargo publish --dry-run`
#    cannot do offline before the dependencies are on crates.io) and this
#    repository's Cargo.lock (the same dependency versions, so the shared
#    target dir's compiled dependencies are reused); the crates no plugin
#    pulls in (the runtime side and the programs) are type-checked from
#    their packaged sources;
# 4. an unchanged copy of plugins/template (it depends on
#    `nri-plugin = "0.1"`) joins the scratch workspace: it is built on the
#    packaged crates, its tests run and its binary answers `-help`;
# 5. two plugin crates written by `nri new plugin` (the default, and one
#    with every event) join the scratch workspace the same way, are
#    rustfmt-clean as written, are built, and their own scenarios pass
#    `nri sim` unchanged; `nri --version` prints the release's version.
#
#   bash scripts/package-check.sh            # uses $CARGO_TARGET_DIR
#
# Budget: 10 minutes wall on a 2-core machine (it prints its elapsed
# time). Measured with the dependencies already compiled for the
# repository's own build: 3 min 52 s of CPU (2 min 32 s before it covered
# all thirteen published crates), 14 min 39 s wall on a machine shared at
# a load average of 18-23; the CPU time is what it costs an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
START=$SECONDS

echo "==> cargo xtask release-check"
cargo xtask release-check

# Every published crate, in publish order.
mapfile -t CRATES < <(cargo xtask release-check --order)
VERSION=$(cargo pkgid -p nri-plugin | sed 's/.*[#@]//')
# Of those, the ones a plugin builds on (built and run below); the others
# are type-checked.
PLUGIN_SIDE=" nri-api nri-mux nri-ttrpc nri-plugin-macros nri-plugin "
CHECKED=()
for c in "${CRATES[@]}"; do
  case "$PLUGIN_SIDE" in *" $c "*) ;; *) CHECKED+=("$c") ;; esac
done

pkg_args=()
for c in "${CRATES[@]}"; do pkg_args+=(-p "$c"); done
echo "==> cargo package ${CRATES[*]}"
cargo package --no-verify --allow-dirty "${pkg_args[@]}"
for c in "${CRATES[@]}"; do
  listing=$(tar -tzf "$CARGO_TARGET_DIR/package/$c-$VERSION.crate")
  for f in LICENSE README.md; do
    if ! grep -qx "$c-$VERSION/$f" <<<"$listing"; then
      echo "error: the package of $c has no $f" >&2
      exit 1
    fi
  done
done

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
  tar -xzf "$CARGO_TARGET_DIR/package/$c-$VERSION.crate" -C "$WORK/crates"
  echo "$c = { path = \"crates/$c-$VERSION\" }" >>"$WORK/Cargo.toml"
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
if [ "$("$NRI" --version)" != "nri $VERSION" ]; then
  echo "error: nri --version prints '$("$NRI" --version)', not 'nri $VERSION'" >&2
  exit 1
fi
"$NRI" new plugin my-scaffold --dir "$WORK/my-scaffold"
"$NRI" new plugin my-scaffold-all --events all --index 60 --dir "$WORK/my-scaffold-all"

check_args=()
for c in "${CHECKED[@]}"; do check_args+=(-p "$c"); done
echo "==> the packaged crates no plugin builds on compile from their packages (${CHECKED[*]})"
(cd "$WORK" && cargo check "${check_args[@]}")

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
echo "ok: release $VERSION: packaged ${#CRATES[@]} crates in publish order; they, the template and two scaffolded plugins build from the packages; the scaffolds pass nri sim"
echo "elapsed: $((SECONDS - START)) s (budget 600 s)"
