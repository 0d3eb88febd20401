//go:build tools

// Package tools pins the helm CLI, which hack/release_rbac.py uses to render the NVIDIA
// GPU Operator charts (the same Helm v4 that helm-controller embeds).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
