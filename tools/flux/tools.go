//go:build tools

// Package tools pins the flux CLI, which `make demo` and tests/e2e/test_flux_cli.py run
// against the local cluster (`flux get helmreleases`, `flux get sources helm`).
package tools

import _ "github.com/fluxcd/flux2/v2/cmd/flux"
