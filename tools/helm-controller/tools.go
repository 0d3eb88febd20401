//go:build tools

// Package tools pins Flux's helm-controller for the end-to-end tests.
package tools

import _ "github.com/fluxcd/helm-controller"
