//go:build tools

// Package tools pins kwokctl (the same sigs.k8s.io/kwok module and version as
// tools/kwok), built only on request (ONLY=kwokctl tools/build.sh) for the
// evaluation in docs/performance.md; the harness does not use it.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwokctl"
