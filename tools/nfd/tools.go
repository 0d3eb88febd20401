//go:build tools

// Package tools pins node-feature-discovery, the version the NVIDIA GPU Operator chart
// deploys. tools/build.sh builds nfd-master and nfd-worker from here: the harness runs them
// against its real node (tests/harness/realnode.py).
package tools

import (
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-master"
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-worker"
)
