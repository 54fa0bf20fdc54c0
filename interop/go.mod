module github.com/nri-rs/interop

go 1.24

require (
	github.com/containerd/nri v0.12.2 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
)
