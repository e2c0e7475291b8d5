package linearize

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// client, server and cluster a test starts must be stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
