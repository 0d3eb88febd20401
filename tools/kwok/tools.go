//go:build tools

// Package tools pins kwok, which plays the kubelet for fake GPU nodes.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
