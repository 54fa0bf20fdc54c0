#!/bin/sh
# Builds the image of every sample plugin listed in deploy/images.yaml with
# deploy/Containerfile. Usage: deploy/build-images.sh [podman|docker] [PLUGIN...]
set -eu
tool=${1:-podman}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^version: "\(.*\)"$/\1/p' "$root/deploy/images.yaml")
# One line per image: "  - {plugin: P, package: K, binary: B, image: I}".
sed -n 's/^  - {plugin: \([^,]*\), package: \([^,]*\), binary: \([^,]*\), image: \([^}]*\)}$/\1 \2 \3 \4/p' \
    "$root/deploy/images.yaml" |
while read -r plugin package binary image; do
    if [ $# -gt 0 ]; then
        case " $* " in *" $plugin "*) ;; *) continue ;; esac
    fi
    echo "building $image:$version ($package, binary $binary)" >&2
    "$tool" build -f "$root/deploy/Containerfile" \
        --build-arg "PACKAGE=$package" --build-arg "BINARY=$binary" \
        -t "$image:$version" "$root"
done
