//go:build tools

// Package tools pins etcd for the local test cluster. Kept in its own module
// so that it cannot move the Kubernetes build's grpc or otel versions.
package tools

import _ "go.etcd.io/etcd/server/v3"
