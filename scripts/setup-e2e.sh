#!/usr/bin/env bash
# Prepare everything the end-to-end harness (tests/e2e/) needs:
#   - host packages (runc, busybox-static, ...) via apt, only if missing;
#   - three containerd versions (containerd, ctr, containerd-shim-runc-v2),
#     each built from its module source into its own cached bin dir;
#   - crictl;
#   - a newer runc (with OCI linux.netDevices, which Debian's runc lacks),
#     used only by pods run with the harness's `runc-netdev` handler;
#   - CNI plugins (Debian's containernetworking-plugins) for pods with their
#     own network namespace;
#   - two OCI image layout tarballs (pause sandbox, busybox workload).
# Idempotent: every artefact is built once into the cache and reused.
# Writes $NRI_E2E_CACHE/env.sh, which exports the paths; source it or let
# tests/e2e/harness.sh source it.
#
# Environment (all optional):
#   NRI_E2E_CACHE                 cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/e2e)
#   NRI_E2E_CONTAINERD_2_1_VERSION  default v2.1.9  (vendors NRI v0.8.0)
#   NRI_E2E_CONTAINERD_2_3_VERSION  default v2.3.7  (vendors NRI v0.12.0)
#   NRI_E2E_CONTAINERD_2_4_VERSION  default v2.4.2  (vendors NRI v0.12.3)
#   NRI_E2E_CRICTL_VERSION        default v1.36.0
#   NRI_E2E_RUNC_VERSION          default v1.5.2 (first runc line with linux.netDevices: 1.4)
#   NRI_E2E_SKIP_APT=1            never call apt-get (fail if a tool is missing)
#   NRI_E2E_REBUILD_IMAGES=1      rebuild the image tarballs
set -euo pipefail

CD21_VERSION=${NRI_E2E_CONTAINERD_2_1_VERSION:-v2.1.9}
CD23_VERSION=${NRI_E2E_CONTAINERD_2_3_VERSION:-v2.3.7}
CD24_VERSION=${NRI_E2E_CONTAINERD_2_4_VERSION:-v2.4.2}
CRICTL_VERSION=${NRI_E2E_CRICTL_VERSION:-v1.36.0}
RUNC_VERSION=${NRI_E2E_RUNC_VERSION:-v1.5.2}
CACHE=${NRI_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/e2e}

log() { printf '[setup-e2e] %s\n' "$*" >&2; }
die() { printf '[setup-e2e] ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

[ "$(id -u)" = 0 ] || die "must run as root (containerd, runc and apt need it)"
mkdir -p "$CACHE"

# ---------------------------------------------------------------- packages
# command-to-check : debian package
need_pkgs=()
check() { command -v "$1" >/dev/null 2>&1 || need_pkgs+=("$2"); }
check runc runc
check gcc gcc
check jq jq
check ip iproute2
check findmnt util-linux
check tar tar
check sha256sum coreutils
# the one-node Kubernetes of tests/e2e/k8s-node.sh: certificates, health checks
check openssl openssl
check curl curl
# the workload image copies /bin/busybox; it must be the static build
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' \
    || need_pkgs+=(busybox-static)
# bridge, host-local and loopback for pods with their own network namespace
[ -x /usr/lib/cni/bridge ] || need_pkgs+=(containernetworking-plugins)
# static libc for the pause program
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/libc.a ] || need_pkgs+=(libc6-dev)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    [ "${NRI_E2E_SKIP_APT:-0}" = 1 ] && die "missing packages: ${need_pkgs[*]} (NRI_E2E_SKIP_APT=1)"
    log "apt-get install ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || log "apt-get update failed; trying install anyway"
    apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi
command -v go >/dev/null || die "go is not installed"

# ---------------------------------------------------------------- containerd, crictl
# Build from the module source, as the main module. `go install pkg@version`
# does not work here: containerd v2.1.x's go.mod has exclude directives
# (rejected by go install), and for cri-tools go install asks the proxy for
# the module's version list, which this proxy refuses (403).
#
# src_build DIR MODULE VERSION LDFLAGS PKG...: binaries into DIR/bin, atomically,
# guarded by a stamp naming what was built. CGO=1 in the environment builds
# with cgo (runc needs it); the default is without.
src_build() {
    local dir=$1 mod=$2 v=$3 ldflags=$4; shift 4
    local cgo=${CGO:-0}
    local want="$mod@$v $* ($ldflags)"
    [ "$cgo" = 0 ] || want="$want cgo"
    if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ]; then
        log "cached: $dir"
        return 0
    fi
    local t0 tmp src
    t0=$(now)
    tmp="$dir.tmp.$$"
    rm -rf "$tmp"; mkdir -p "$tmp/bin"
    log "building $mod@$v -> $dir (this takes minutes the first time)"
    src=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$mod@$v" | jq -r .Dir) || src=""
    if [ -z "$src" ] || [ ! -d "$src" ]; then
        rm -rf "$tmp"; die "go mod download $mod@$v failed"
    fi
    cp -r "$src" "$tmp/src"
    chmod -R u+w "$tmp/src"
    # CGO off (unless asked): no btrfs headers/libs needed; no_btrfs for good measure.
    # -trimpath: the build cache is keyed on paths; the source copy lives in a
    # fresh temp dir each time, so without it nothing of the module is reused.
    if ! (cd "$tmp/src" && CGO_ENABLED=$cgo GOFLAGS="-mod=mod -buildvcs=false" \
            go build -trimpath -tags no_btrfs -ldflags "$ldflags" -o "$tmp/bin/" "$@" >&2); then
        rm -rf "$tmp"
        die "building $mod@$v failed"
    fi
    rm -rf "$tmp/src"
    printf '%s' "$want" >"$tmp/.stamp"
    rm -rf "$dir"; mv "$tmp" "$dir"
    log "built $dir in $(elapsed "$t0") s"
}

containerd_set() {
    local v=$1 m=github.com/containerd/containerd/v2
    src_build "$CACHE/containerd-$v" "$m" "$v" \
        "-X $m/version.Version=$v -X $m/version.Revision=nri-rs-e2e" \
        ./cmd/containerd ./cmd/ctr ./cmd/containerd-shim-runc-v2
}
containerd_set "$CD21_VERSION"
containerd_set "$CD23_VERSION"
containerd_set "$CD24_VERSION"
src_build "$CACHE/crictl-$CRICTL_VERSION" sigs.k8s.io/cri-tools "$CRICTL_VERSION" \
    "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" ./cmd/crictl
# runc with linux.netDevices (the network-device-injector test). Built
# without the seccomp tag (no libseccomp headers needed): the harness's pods
# ask for no seccomp profile.
CGO=1 src_build "$CACHE/runc-$RUNC_VERSION" github.com/opencontainers/runc "$RUNC_VERSION" \
    "-X main.version=${RUNC_VERSION#v}" .

# ---------------------------------------------------------------- images
IMAGES="$CACHE/images"
PAUSE_TAR="$IMAGES/pause.tar"
BUSYBOX_TAR="$IMAGES/busybox.tar"
PAUSE_REF=localhost/nri-e2e/pause:1
BUSYBOX_REF=localhost/nri-e2e/busybox:1
IMAGES_REV=2   # bump when the image contents change

# Reproducible tar of a directory's contents.
det_tar() { # SRC_DIR OUT_TAR
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
        -C "$1" -cf "$2" .
}

# oci_pack ROOTFS OUT_TAR REF ENTRYPOINT_JSON CMD_JSON
oci_pack() {
    local rootfs=$1 out=$2 ref=$3 entry=$4 cmd=$5
    local lay; lay=$(mktemp -d)
    mkdir -p "$lay/blobs/sha256"
    det_tar "$rootfs" "$lay/layer.tar"
    local ldig lsize
    ldig=$(sha256sum "$lay/layer.tar" | cut -d' ' -f1)
    lsize=$(stat -c %s "$lay/layer.tar")
    mv "$lay/layer.tar" "$lay/blobs/sha256/$ldig"
    jq -cn --arg d "sha256:$ldig" --argjson e "$entry" --argjson c "$cmd" '{
        architecture: "amd64", os: "linux",
        config: {Entrypoint: $e, Cmd: $c, WorkingDir: "/",
                 Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        rootfs: {type: "layers", diff_ids: [$d]},
        history: [{created_by: "nri-rs scripts/setup-e2e.sh"}]
    }' >"$lay/config.json"
    local cdig csize
    cdig=$(sha256sum "$lay/config.json" | cut -d' ' -f1)
    csize=$(stat -c %s "$lay/config.json")
    mv "$lay/config.json" "$lay/blobs/sha256/$cdig"
    jq -cn --arg c "sha256:$cdig" --argjson cs "$csize" --arg l "sha256:$ldig" --argjson ls "$lsize" '{
        schemaVersion: 2,
        mediaType: "application/vnd.oci.image.manifest.v1+json",
        config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
        layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $l, size: $ls}]
    }' >"$lay/manifest.json"
    local mdig msize
    mdig=$(sha256sum "$lay/manifest.json" | cut -d' ' -f1)
    msize=$(stat -c %s "$lay/manifest.json")
    mv "$lay/manifest.json" "$lay/blobs/sha256/$mdig"
    printf '{"imageLayoutVersion":"1.0.0"}' >"$lay/oci-layout"
    jq -cn --arg m "sha256:$mdig" --argjson ms "$msize" --arg ref "$ref" '{
        schemaVersion: 2,
        mediaType: "application/vnd.oci.image.index.v1+json",
        manifests: [{
            mediaType: "application/vnd.oci.image.manifest.v1+json",
            digest: $m, size: $ms,
            platform: {architecture: "amd64", os: "linux"},
            annotations: {
                "io.containerd.image.name": $ref,
                "org.opencontainers.image.ref.name": ($ref | sub(".*:"; ""))
            }
        }]
    }' >"$lay/index.json"
    det_tar "$lay" "$out.tmp"
    mv "$out.tmp" "$out"
    rm -rf "$lay"
}

build_images() {
    local t0 w
    t0=$(now)
    w=$(mktemp -d)
    trap 'rm -rf "$w"' RETURN
    mkdir -p "$IMAGES"

    # pause: waits in pause(), reaps children, exits 0 on TERM/INT.
    cat >"$w/pause.c" <<'EOF'
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }

static void on_chld(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_chld;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    for (;;)
        pause();
    return 0;
}
EOF
    mkdir -p "$w/pause-root"
    gcc -static -Os -s -o "$w/pause-root/pause" "$w/pause.c"
    oci_pack "$w/pause-root" "$PAUSE_TAR" "$PAUSE_REF" '["/pause"]' 'null'

    # busybox workload: every applet as a symlink in /bin.
    local r="$w/bb-root"
    mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/root" "$r/proc" "$r/sys" "$r/dev" "$r/var"
    chmod 1777 "$r/tmp"
    cp /bin/busybox "$r/bin/busybox"
    local a
    for a in $(/bin/busybox --list); do
        [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"
    done
    for a in sh sleep env cat ls id; do
        [ -L "$r/bin/$a" ] || die "busybox lacks applet $a"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
    oci_pack "$r" "$BUSYBOX_TAR" "$BUSYBOX_REF" 'null' '["/bin/sh"]'

    printf '%s' "$IMAGES_REV" >"$IMAGES/.stamp"
    log "built images in $(elapsed "$t0") s"
}
if [ "${NRI_E2E_REBUILD_IMAGES:-0}" = 1 ] || [ ! -f "$PAUSE_TAR" ] || [ ! -f "$BUSYBOX_TAR" ] \
        || [ "$(cat "$IMAGES/.stamp" 2>/dev/null)" != "$IMAGES_REV" ]; then
    build_images
else
    log "cached: $IMAGES"
fi

# ---------------------------------------------------------------- env file
ENV="$CACHE/env.sh"
cat >"$ENV.tmp" <<EOF
# Generated by scripts/setup-e2e.sh; paths of the e2e tool set.
export NRI_E2E_CACHE='$CACHE'
export NRI_E2E_CONTAINERD_2_1='$CACHE/containerd-$CD21_VERSION/bin'
export NRI_E2E_CONTAINERD_2_1_VERSION='$CD21_VERSION'
export NRI_E2E_CONTAINERD_2_3='$CACHE/containerd-$CD23_VERSION/bin'
export NRI_E2E_CONTAINERD_2_3_VERSION='$CD23_VERSION'
export NRI_E2E_CONTAINERD_2_4='$CACHE/containerd-$CD24_VERSION/bin'
export NRI_E2E_CONTAINERD_2_4_VERSION='$CD24_VERSION'
export NRI_E2E_CRICTL='$CACHE/crictl-$CRICTL_VERSION/bin/crictl'
export NRI_E2E_RUNC='$(command -v runc)'
export NRI_E2E_RUNC_NETDEV='$CACHE/runc-$RUNC_VERSION/bin/runc'
export NRI_E2E_CNI_BIN='/usr/lib/cni'
export NRI_E2E_PAUSE_TAR='$PAUSE_TAR'
export NRI_E2E_PAUSE_IMAGE='$PAUSE_REF'
export NRI_E2E_BUSYBOX_TAR='$BUSYBOX_TAR'
export NRI_E2E_BUSYBOX_IMAGE='$BUSYBOX_REF'
EOF
mv "$ENV.tmp" "$ENV"
log "env file: $ENV"
cat "$ENV"
