module github.com/nri-rs/interop/peer

go 1.24.0

require (
	github.com/sirupsen/logrus v1.9.3
	google.golang.org/protobuf v1.34.1
)

require golang.org/x/sys v0.0.0-20220715151400-c0bba94af5f8 // indirect
