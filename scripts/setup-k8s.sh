#!/usr/bin/env bash
# Build the parts of a one-node Kubernetes cluster for the e2e tests
# (tests/e2e/k8s-node.sh runs it; docs/dev/k8s-node.md explains it):
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
#   and kubectl, all of Kubernetes v1.34 (etcd at the version that release
#   pins), built from the Go module proxy in ONE `go build` invocation, so
#   the packages they share are compiled once.
#
# k8s.io/kubernetes is built as the main module. Its module zip holds no
# staging modules (and its go.mod replaces every k8s.io/* module by
# ./staging/src/...), so the copy drops those replace directives and
# requires the published k8s.io/* v0.MINOR.PATCH modules instead. etcd's
# server (go.etcd.io/etcd/server/v3, a main package) is already in the
# kubernetes module graph at the version v1.34 tests with, so it is built
# in the same invocation with the same dependency versions.
#
# Cached: $NRI_K8S_CACHE/kubernetes-$VERSION/bin, guarded by a stamp naming
# what was built; built once, reused (a no-op in well under a second). A
# failed build leaves no cache entry. Whoever builds holds an exclusive
# flock on $NRI_K8S_CACHE/build.lock for the whole build, so a caller that
# started the build in the background and the tests that
# need it later (tests/e2e/src/k8s.rs) can wait for it by taking the lock.
#
# Usage:
#   scripts/setup-k8s.sh            build if needed, write $NRI_K8S_CACHE/env.sh, print it
#
# Environment (all optional):
#   NRI_K8S_CACHE      cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/k8s)
#   NRI_K8S_VERSION    default v1.34.4 (the newest v1.34 patch on the proxy)
#   NRI_K8S_TIMING     file to append "name seconds" timing lines to
set -euo pipefail

K8S_VERSION=${NRI_K8S_VERSION:-v1.34.4}
CACHE=${NRI_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/k8s}
# Bump when what is built or how changes.
BUILD_REV=1
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

log() { printf '[setup-k8s] %s\n' "$*" >&2; }
die() { printf '[setup-k8s] ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

command -v go >/dev/null || die "go is not installed"
command -v flock >/dev/null || die "flock is not installed (util-linux)"
mkdir -p "$CACHE"

DIR="$CACHE/kubernetes-$K8S_VERSION"
WANT="k8s.io/kubernetes@$K8S_VERSION rev $BUILD_REV: ${BINARIES[*]}"

cached() { [ -f "$DIR/.stamp" ] && [ "$(cat "$DIR/.stamp")" = "$WANT" ]; }

# The staging modules the main module requires at v0.0.0, as published
# modules at the matching v0 version.
prepare_source() { # SRC_DIR
    local src=$1 v0="v0.${K8S_VERSION#v1.}" mods
    mods=$(sed -n 's#^\t\(k8s\.io/[a-z0-9-]*\) v0\.0\.0$#\1#p' "$src/go.mod")
    [ -n "$mods" ] || die "no k8s.io/* v0.0.0 requirements in $src/go.mod"
    # Drop the replace block's ./staging lines and pin the published versions.
    sed -i '/=> \.\/staging\//d' "$src/go.mod"
    local m
    for m in $mods; do
        sed -i "s#^\t$m v0\.0\.0\$#\t$m $v0#" "$src/go.mod"
    done
    if grep -q '=> ./staging/' "$src/go.mod"; then
        die "staging replaces left in go.mod"
    fi
    rm -rf "$src/vendor" "$src/go.work" "$src/go.work.sum" "$src/staging"
}

build() {
    local t0 tmp src etcd_v
    t0=$(now)
    tmp="$DIR.tmp.$$"
    rm -rf "$tmp"; mkdir -p "$tmp/bin"
    trap 'rm -rf "$tmp"' EXIT
    log "building Kubernetes $K8S_VERSION (${BINARIES[*]}) -> $DIR (minutes the first time)"
    src=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') \
        || die "go mod download k8s.io/kubernetes@$K8S_VERSION failed"
    [ -d "$src" ] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no directory"
    # Only what the build needs of the 100 MB module.
    mkdir -p "$tmp/src"
    cp -r "$src/go.mod" "$src/go.sum" "$src/cmd" "$src/pkg" "$src/plugin" "$src/third_party" "$tmp/src/"
    chmod -R u+w "$tmp/src"
    prepare_source "$tmp/src"
    etcd_v=$(sed -n 's#^\tgo\.etcd\.io/etcd/server/v3 \(v[0-9.]*\).*#\1#p' "$tmp/src/go.mod")
    [ -n "$etcd_v" ] || die "kubernetes $K8S_VERSION's go.mod names no go.etcd.io/etcd/server/v3"
    local v=$K8S_VERSION major minor cb=k8s.io/component-base/version cg=k8s.io/client-go/pkg/version
    major=${v#v}; major=${major%%.*}
    minor=${v#v*.}; minor=${minor%%.*}
    local x ldflags="-s -w"
    for x in "$cb" "$cg"; do
        ldflags="$ldflags -X $x.gitVersion=$v -X $x.gitMajor=$major -X $x.gitMinor=$minor"
        ldflags="$ldflags -X $x.gitCommit=nri-rs-e2e -X $x.gitTreeState=clean"
        ldflags="$ldflags -X $x.buildDate=1970-01-01T00:00:00Z"
    done
    ldflags="$ldflags -X go.etcd.io/etcd/api/v3/version.GitSHA=nri-rs-e2e"
    # One invocation: the packages the six share are compiled once. -trimpath
    # keeps the build cache valid across fresh source copies.
    local tb
    tb=$(now)
    if ! (cd "$tmp/src" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" \
            go build -trimpath -ldflags "$ldflags" -o "$tmp/bin/" \
            ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler \
            ./cmd/kubelet ./cmd/kubectl go.etcd.io/etcd/server/v3 >&2); then
        die "building Kubernetes $K8S_VERSION failed"
    fi
    log "go build took $(elapsed "$tb") s"
    # go build names the etcd main package after its path (".../server/v3").
    local f
    for f in v3 server; do
        [ -f "$tmp/bin/$f" ] && mv "$tmp/bin/$f" "$tmp/bin/etcd"
    done
    for f in "${BINARIES[@]}"; do
        [ -x "$tmp/bin/$f" ] || die "$f missing after the build"
    done
    printf '%s\n' "$etcd_v" >"$tmp/etcd-version"
    rm -rf "$tmp/src"
    printf '%s' "$WANT" >"$tmp/.stamp"
    rm -rf "$DIR"; mv "$tmp" "$DIR"
    trap - EXIT
    log "built $DIR in $(elapsed "$t0") s"
    [ -z "${NRI_K8S_TIMING:-}" ] || printf 'kubernetes-build %s\n' "$(elapsed "$t0")" >>"$NRI_K8S_TIMING"
}

# Exclusive while building; waiting callers take the same lock.
exec 9>"$CACHE/build.lock"
flock 9
if cached; then
    log "cached: $DIR"
else
    build
fi

ENV="$CACHE/env.sh"
cat >"$ENV.tmp" <<EOF
# Generated by scripts/setup-k8s.sh; the one-node Kubernetes of the e2e tests.
export NRI_K8S_VERSION='$K8S_VERSION'
export NRI_K8S_ETCD_VERSION='$(cat "$DIR/etcd-version")'
export NRI_K8S_BIN='$DIR/bin'
EOF
mv "$ENV.tmp" "$ENV"
log "env file: $ENV"
cat "$ENV"
