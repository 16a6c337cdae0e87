//go:build tools

// Package franzgo pins franz-go, whose own integration tests (pkg/kgo) and admin tests
// (pkg/kadm) tests/go/run.sh runs against a real Sluice broker. Nothing here is built; the
// package's one test of its own is controlbatch_test.go (decision 0045's gate).
package franzgo

import (
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kgo"
)
