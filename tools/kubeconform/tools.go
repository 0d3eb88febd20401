//go:build tools

// Package tools pins kubeconform, which validates the rendered manifests
// against JSON schemas (make check; schemas generated offline by
// hack/kubeconform-schemas.py).
package tools

import _ "github.com/yannh/kubeconform/cmd/kubeconform"
