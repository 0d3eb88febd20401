//go:build tools

// Package tools pins Flux's source-controller for the end-to-end tests.
package tools

import _ "github.com/fluxcd/source-controller"
