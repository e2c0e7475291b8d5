package sdktest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestNodeSDK runs node/sdk.test.mjs, the same scenarios with the Node
// openai package (node/package.json pins it), against the demo TestMain
// started. It needs node and the package installed (npm ci in node/);
// without them it is skipped, unless RAMPMETER_REQUIRE_NODE=1 (CI), when
// it fails.
func TestNodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node is not installed"
	default:
		if _, err := os.Stat(filepath.Join("node", "node_modules", "openai", "package.json")); err != nil {
			missing = "the openai package is not installed (run npm ci in sdktest/node)"
		}
	}
	if missing != "" {
		if os.Getenv("RAMPMETER_REQUIRE_NODE") == "1" {
			t.Fatal(missing)
		}
		t.Skip(missing)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Dir = "node"
	cmd.Env = append(os.Environ(), "DEMO_BASE_URL="+demoURL)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test sdk.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the Node SDK tests failed: %v", err)
	}
}
