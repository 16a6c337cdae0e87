//go:build tools

// Package franzgo pins franz-go, whose own integration tests (pkg/kgo) and admin tests
// (pkg/kadm) tests/go/run.sh runs against a real Sluice broker. Nothing here is built.
package franzgo

import (
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kgo"
)
