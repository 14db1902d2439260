//go:build tools

// The programs built from this module (scripts/kube-testbed.sh), named here so that go mod tidy
// keeps what they need.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
