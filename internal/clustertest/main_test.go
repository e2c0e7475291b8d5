package clustertest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// client a test opens must be closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
