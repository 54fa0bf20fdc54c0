module github.com/nri-rs/plugins/wasm-annotator

go 1.24.0

require github.com/containerd/nri v0.12.5

require (
	github.com/knqyf263/go-plugin v0.9.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	google.golang.org/protobuf v1.34.1 // indirect
)
