# Sourced by the scripts that run Go (build-go-peers.sh, build-wasm-guest.sh):
# finds the Go toolchain and sets the environment every Go build of ours
# uses. The caller defines die() first.
#
# Sets and exports:
#   GO                the go binary (as given, else go on PATH, else
#                     /usr/local/go/bin/go)
#   GOCACHE, GOMODCACHE
#                     as given; when unset
#                     ${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/go/{build,mod}
#   GOFLAGS, GOWORK   module mode, no VCS stamping, no go.work
#   CGO_ENABLED       as given, else 0 (a caller that needs it off whatever
#                     the caller's environment says sets it after sourcing)
# and creates the two cache directories.

GO=${GO:-}
if [[ -z $GO ]]; then
	if command -v go >/dev/null 2>&1; then
		GO=$(command -v go)
	elif [[ -x /usr/local/go/bin/go ]]; then
		GO=/usr/local/go/bin/go
	else
		die "no Go toolchain found (install Go >= 1.24 or set GO=/path/to/go)"
	fi
fi
export GO

GO_CACHE_BASE=${XDG_CACHE_HOME:-$HOME/.cache}/nri-rs/go
export GOCACHE=${GOCACHE:-$GO_CACHE_BASE/build}
export GOMODCACHE=${GOMODCACHE:-$GO_CACHE_BASE/mod}
export GOFLAGS="-mod=mod -buildvcs=false"
export GOWORK=off
export CGO_ENABLED=${CGO_ENABLED:-0}
mkdir -p "$GOCACHE" "$GOMODCACHE"
