package ratelimit_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADMEExample keeps the README's "AI APIs" program identical to
// package llm's Example (llm/example_test.go), which go test compiles,
// runs and checks, so the README's code is known to compile and to print
// what the README says.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	ex, err := os.ReadFile("llm/example_test.go")
	require.NoError(t, err)

	section := string(readme)
	i := strings.Index(section, "## AI APIs")
	require.GreaterOrEqual(t, i, 0, "the README has an AI APIs section")
	section = section[i:]
	start := strings.Index(section, "func main() {\n")
	require.GreaterOrEqual(t, start, 0)
	body := section[start+len("func main() {\n"):]
	body = body[:strings.Index(body, "\n}\n")+1]

	src := string(ex)
	start = strings.Index(src, "func Example() {\n")
	require.GreaterOrEqual(t, start, 0)
	want := src[start+len("func Example() {\n"):]
	want = strings.TrimRight(want[:strings.Index(want, "\t// Output:")], "\n") + "\n"
	assert.Equal(t, want, body)

	// And the output the README shows is the example's.
	out := src[strings.Index(src, "\t// Output:\n")+len("\t// Output:\n"):]
	for line := range strings.Lines(strings.TrimSuffix(out, "}\n")) {
		assert.Contains(t, section, strings.TrimPrefix(strings.TrimSpace(line), "// "))
	}
}
