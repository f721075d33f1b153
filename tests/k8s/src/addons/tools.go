//go:build tools

// Keeps Helm's main package in this module's dependency graph for `go mod tidy`.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
