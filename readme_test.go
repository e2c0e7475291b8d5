package ratelimit_test

import (
	"encoding/json"
	"fmt"
	"go/format"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmePrograms are the README's complete programs, each the twin of an
// Example that go test compiles, runs and checks.
var readmePrograms = []struct {
	heading string // the README section holding the program
	file    string // the Example's file
	example string // the Example's name
}{
	{"## Quick start", "example_quickstart_test.go", "Example_quickStart"},
	{"## Many instances: the Redis store", "example_redis_test.go", "Example_redis"},
	{"## AI APIs", "llm/example_gateway_test.go", "Example_gateway"},
}

// TestREADMEPrograms keeps every complete program in the README (the first
// ```go block of its section, package main) identical to its Example, and
// the output the README shows after it identical to the Example's Output.
// An Example may differ from its program in marked lines only: a line
// ending in "// README: <line>" reads <line> in the README (the Example
// sends requests where the program serves, or uses a local Redis), and a
// line with "// not in the README" is the Example's alone. Lines are
// compared with runs of blanks folded (gofmt aligns comments differently),
// and the program's imports must be its Example file's; the program must
// be gofmt-ed. Then go build
// compiles the README's programs as they are written.
func TestREADMEPrograms(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	programs := map[string]string{}
	for _, p := range readmePrograms {
		t.Run(p.example, func(t *testing.T) {
			section := readmeSection(t, string(readme), p.heading)
			program := codeBlock(t, section, "```go\n")
			programs[p.example] = program
			formatted, err := format.Source([]byte(program))
			require.NoError(t, err)
			assert.Equal(t, string(formatted), program, "the README's program is gofmt-ed")
			imports, body := splitProgram(t, program)

			src, err := os.ReadFile(p.file)
			require.NoError(t, err)
			fileImports, exBody, output := splitExample(t, string(src), p.example)
			assert.Equal(t, fileImports, imports, "the program's imports are its Example file's")
			assert.Equal(t, readmeLines(exBody), foldLines(body))

			// The output block follows the program.
			after := section[strings.Index(section, program)+len(program)+len("```\n"):]
			shown := codeBlock(t, after, "```\n")
			assert.Equal(t, output, shown, "the output the README shows is the Example's")
		})
	}
	t.Run("go build", func(t *testing.T) { buildPrograms(t, programs) })
}

// readmeSection returns the README from heading to the next "## " heading.
func readmeSection(t *testing.T, readme, heading string) string {
	t.Helper()
	i := strings.Index(readme, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "the README has a section %q", heading)
	s := readme[i+1:]
	if j := strings.Index(s[len(heading):], "\n## "); j >= 0 {
		s = s[:len(heading)+j+1]
	}
	return s
}

// codeBlock returns the contents of the first fenced block of s opened by
// fence ("```go\n", or "```\n" for plain text).
func codeBlock(t *testing.T, s, fence string) string {
	t.Helper()
	i := strings.Index(s, fence)
	require.GreaterOrEqual(t, i, 0, "a %q block", strings.TrimSpace(fence))
	s = s[i+len(fence):]
	j := strings.Index(s, "```\n")
	require.GreaterOrEqual(t, j, 0, "the block is closed")
	return s[:j]
}

// splitProgram returns a package main program's import lines and the body
// of its func main.
func splitProgram(t *testing.T, program string) (imports []string, body string) {
	t.Helper()
	require.True(t, strings.HasPrefix(program, "package main\n\nimport (\n"), "a complete program:\n%s", program)
	rest := program[len("package main\n\nimport (\n"):]
	end := strings.Index(rest, "\n)\n\nfunc main() {\n")
	require.GreaterOrEqual(t, end, 0, "imports, then func main")
	imports = importLines(rest[:end])
	body = rest[end+len("\n)\n\nfunc main() {\n"):]
	require.True(t, strings.HasSuffix(body, "\n}\n"), "the program ends with main")
	return imports, strings.TrimSuffix(body, "}\n")
}

// splitExample returns the import lines of the Example file src, the body
// of the Example name up to its Output comment, and the output it checks.
func splitExample(t *testing.T, src, name string) (imports []string, body, output string) {
	t.Helper()
	i := strings.Index(src, "import (\n")
	require.GreaterOrEqual(t, i, 0)
	imports = importLines(src[i+len("import (\n") : i+strings.Index(src[i:], "\n)\n")])
	start := strings.Index(src, "func "+name+"() {\n")
	require.GreaterOrEqual(t, start, 0, "the file has func %s", name)
	src = src[start+len("func "+name+"() {\n"):]
	out := strings.Index(src, "\t// Output:\n")
	require.GreaterOrEqual(t, out, 0, "%s checks its output", name)
	body = strings.TrimRight(src[:out], "\n") + "\n"
	for line := range strings.Lines(src[out+len("\t// Output:\n") : strings.Index(src, "\n}\n")+1]) {
		output += strings.TrimPrefix(strings.TrimPrefix(line, "\t//"), " ")
	}
	return imports, body, output
}

// importLines returns the non-blank lines of an import block, trimmed.
func importLines(block string) []string {
	var lines []string
	for line := range strings.Lines(block) {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// readmeLines returns the lines of an Example body as the README has them
// (see TestREADMEPrograms), blanks folded.
func readmeLines(body string) []string {
	var lines []string
	for line := range strings.Lines(body) {
		if strings.Contains(line, "// not in the README") {
			continue
		}
		if i := strings.Index(line, "// README: "); i >= 0 {
			line = line[i+len("// README: "):]
		}
		lines = append(lines, strings.Join(strings.Fields(line), " "))
	}
	return lines
}

// foldLines returns the lines of s with blanks folded.
func foldLines(s string) []string {
	var lines []string
	for line := range strings.Lines(s) {
		lines = append(lines, strings.Join(strings.Fields(line), " "))
	}
	return lines
}

// buildPrograms compiles the README's programs as written, as packages of
// this module (an overlay: nothing is written into the tree).
func buildPrograms(t *testing.T, programs map[string]string) {
	if testing.Short() {
		t.Skip("-short: the build of the README's programs is skipped")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH: %v", err)
	}
	root, err := os.Getwd()
	require.NoError(t, err)
	tmp := t.TempDir()
	overlay := map[string]map[string]string{"Replace": {}}
	var pkgs []string
	for name, program := range programs {
		file := filepath.Join(tmp, name+".go")
		require.NoError(t, os.WriteFile(file, []byte(program), 0o600))
		dir := filepath.Join("internal", "readmeprograms", strings.ToLower(name))
		overlay["Replace"][filepath.Join(root, dir, "main.go")] = file
		pkgs = append(pkgs, "./"+filepath.ToSlash(dir))
	}
	js, err := json.Marshal(overlay)
	require.NoError(t, err)
	overlayFile := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(overlayFile, js, 0o600))
	// go build, not go vet: vet runs in the package's directory, which
	// the overlay does not create. The binaries go to tmp.
	cmd := exec.Command(goBin, append([]string{"build", "-overlay", overlayFile, "-o", tmp + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "go build of the README's programs:\n%s", out)
}

// sendEleven sends h eleven GET / requests from one client address, as a
// client would within a second, and prints what came back: the README's
// programs serve h instead (see Example_quickStart).
func sendEleven(h http.Handler) {
	var last *httptest.ResponseRecorder
	for i := 1; i <= 11; i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil)) // from 192.0.2.1
		switch {
		case i <= 10 && (w.Code != http.StatusOK || w.Body.String() != "hello\n"):
			fmt.Printf("request %d: %d %s", i, w.Code, w.Body.String())
		case i == 10:
			fmt.Print("requests 1-10: 200 ", w.Body.String())
		}
		last = w
	}
	fmt.Printf("request 11: %d Retry-After: %s\n%s", last.Code, last.Header().Get("Retry-After"), last.Body.String())
}

// startMiniredis starts an embedded Redis for Example_redis.
func startMiniredis() *miniredis.Miniredis {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	return mr
}
