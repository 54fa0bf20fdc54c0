#!/usr/bin/env bash
# The full test suite, with all of its set-up: apt packages, cargo tools, the Go
# interop peers, containerd + crictl + images for the end-to-end tests.
#
#   bash scripts/test.sh            # everything
#   NRI_SKIP_E2E=1 bash scripts/test.sh   # no containerd end-to-end tests
#                                         # (every e2e test runs on containerd 2.1, 2.3
#                                         # and 2.4: about 7.5 min, and about 4 min on the
#                                         # one-node Kubernetes; see tests/e2e/README.md)
#   NRI_SKIP_CRITEST=1 bash scripts/test.sh   # e2e without critest's NRI cases
#   NRI_SKIP_K8S=1 bash scripts/test.sh   # e2e without the one-node Kubernetes
#                                         # (its build and its tests, see docs/dev/k8s-node.md)
#   NRI_FUZZ_SECONDS=30 bash scripts/test.sh  # fuzz time per target (default 20)
#
# Builds are cached under ${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs
mkdir -p "$CACHE"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
# Line tables only in the test builds: file and line in backtraces, and a
# target dir a third of the size (full debug info made it pass 35 GB).
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}
export NRI_INTEROP_BIN=${NRI_INTEROP_BIN:-$ROOT/interop/bin}
export NRI_REQUIRE_INTEROP=1

# Each step says when it starts (time since this script started), so a
# slow suite shows in the log.
step() { printf '\n==> %s (at %dm%02ds)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
need_apt=()
command -v gcc >/dev/null || need_apt+=(gcc)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
if [ ${#need_apt[@]} -gt 0 ]; then
  step "apt-get install ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

# The Kubernetes binaries of the one-node cluster (tests/e2e/k8s-node.sh)
# build in the background from here on, niced, while the rest compiles: a
# cold build is minutes of CPU, cached after. The node's tests wait for it
# (scripts/setup-k8s.sh holds a lock while it builds).
k8s_pid=""
if [ "${NRI_SKIP_E2E:-0}" != 1 ] && [ "${NRI_SKIP_K8S:-0}" != 1 ]; then
  step "Kubernetes build (in the background, log: $CACHE/setup-k8s.log)"
  setsid nice -n 10 bash scripts/setup-k8s.sh >"$CACHE/setup-k8s.log" 2>&1 </dev/null &
  k8s_pid=$!
  trap '[ -z "$k8s_pid" ] || kill -TERM -- "-$k8s_pid" 2>/dev/null || true' EXIT
else
  export NRI_E2E_SKIP_K8S=1
fi

step "codegen is up to date"
cargo xtask codegen --check

# The public API of each published crate against public-api/*.txt and the
# last release tag (docs/dev/RELEASING.md). Skipped, building nothing,
# until the release procedure takes the first snapshot; after it, about
# 4 min of CPU from scratch (rustdoc JSON of the published crates and a
# check of their dependencies in <target>/public-api), 20 s when cached.
step "public API of the published crates (cargo xtask public-api)"
cargo xtask public-api

# rust-version builds: the published crates type-checked with that
# toolchain (skipped, saying so, where rustup cannot install it). About
# 2 min of CPU from scratch, seconds when cached.
step "MSRV (scripts/msrv-check.sh)"
bash scripts/msrv-check.sh

step "no source file over 800 lines unless listed in scripts/large-files.txt"
bash scripts/check-file-sizes.sh

step "no function over 80 lines unless listed in scripts/long-functions.txt"
bash scripts/check-long-functions.sh

step "Go interop peers"
bash scripts/build-go-peers.sh

if [ "${NRI_SKIP_E2E:-0}" != 1 ] && [ -f scripts/setup-e2e.sh ]; then
  step "containerd end-to-end set-up"
  bash scripts/setup-e2e.sh
  export NRI_E2E=1
  if [ "${NRI_SKIP_CRITEST:-0}" != 1 ]; then
    step "critest (the peer suite of nri conformance)"
    bash scripts/setup-critest.sh >/dev/null
    export NRI_E2E_REQUIRE_CRITEST=1
  fi
fi

step "cargo test"
cargo test --workspace --all-targets --no-fail-fast
cargo test --workspace --doc
if [ -n "$k8s_pid" ]; then
  wait "$k8s_pid" || { echo "error: scripts/setup-k8s.sh failed; see $CACHE/setup-k8s.log" >&2; exit 1; }
  k8s_pid=""
  grep -h 'built .* in\|cached:' "$CACHE/setup-k8s.log" || true
fi

# The race test of the runtime's Synchronize must catch lost events: built
# with the queuing for synchronizing plugins turned off (a test-only
# feature), it has to fail. About a minute (one more build of nri-runtime).
step "sync race test with the queuing turned off (must fail)"
race_log="$CACHE/sync-race-no-queue.log"
if cargo test -p nri-runtime --features test-no-sync-queue --test sync_race \
    registrations_race_creations_without_losing_or_duplicating >"$race_log" 2>&1; then
  echo "error: tests/sync_race.rs passed with the queuing turned off (feature test-no-sync-queue): it no longer detects objects lost around Synchronize" >&2
  exit 1
elif ! grep -q "around Synchronize\|deferred path was taken" "$race_log"; then
  echo "error: the sync race test with the queuing turned off did not fail for the expected reason; see $race_log" >&2
  tail -n 30 "$race_log" >&2
  exit 1
fi
echo "ok: with the queuing turned off the sync race test fails, as it must"

# The fault-schedule checker must catch the same loss on its own seeds
# (docs/reliability.md, section 6): built with the queuing turned off, its
# triage of seeds 0-39 must report new lost or never-created objects.
# About a minute and a half (nri-runtime, nri-proxy and the checker built
# once more).
step "fault-schedule checker with the queuing turned off (must find lost objects)"
checker_log="$CACHE/checker-no-sync-queue.log"
if cargo run -q -p nri-checker --features test-no-sync-queue -- triage --seeds 40 --mode runtime >"$checker_log" 2>&1; then
  echo "error: the checker found nothing with the queuing turned off (feature test-no-sync-queue)" >&2
  exit 1
elif ! grep -q "^runtime [0-9]* new .*\(never-created\|lost\)" "$checker_log"; then
  echo "error: the checker with the queuing turned off did not report lost objects; see $checker_log" >&2
  tail -n 30 "$checker_log" >&2
  exit 1
fi
echo "ok: with the queuing turned off the checker reports lost objects, as it must"

# The dry run of the release: release-check, every published crate
# packaged in publish order and type-checked or built from its package, a
# plugin crate outside the repository built on the packaged sources. About
# 4 min of CPU; budget 10 minutes wall (see the script's header).
step "release dry run: cargo package, and a plugin crate outside the repository"
bash scripts/package-check.sh

if [ "${NRI_SKIP_FUZZ:-0}" != 1 ]; then
  step "fuzz (short runs)"
  bash scripts/fuzz.sh "${NRI_FUZZ_SECONDS:-20}"
fi

step "all tests passed"
