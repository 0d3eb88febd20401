//go:build tools

// Package tools pins distribution's registry (v3): the OCI registry the KLM tests push the
// manager image and the module's OCM component to, and Kyma Lifecycle Manager reads from.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
