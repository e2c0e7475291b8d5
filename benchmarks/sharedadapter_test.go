package benchmarks_test

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// sharedAdapter derives the adapter for the shared harness (../shared/bench,
// module benchharness) from adapters/rampmeter.go: the decider import of
// that module, and no rampmeter-ai row (that harness sends no request
// bodies, so the estimator and its helpers go too).
func sharedAdapter(t *testing.T, src string) string {
	t.Helper()
	// cut removes s's text from the first from up to to (included when
	// keepTo is false).
	cut := func(s, from, to string, keepTo bool) string {
		i := strings.Index(s, from)
		if i < 0 {
			t.Fatalf("adapters/rampmeter.go has no %q: update sharedAdapter", from)
		}
		j := strings.Index(s[i:], to)
		if j < 0 {
			t.Fatalf("adapters/rampmeter.go has no %q after %q: update sharedAdapter", to, from)
		}
		if keepTo {
			return s[:i] + s[i+j:]
		}
		return s[:i] + s[i+j+len(to):]
	}
	src = strings.Replace(src, `"github.com/rampmeter/ratelimit/benchmarks/decider"`, `"benchharness/decider"`, 1)
	src = strings.Replace(src, "\t\"github.com/rampmeter/ratelimit/llm\"\n", "", 1)
	src = cut(src, "// aiChatBody", "func init()", true)
	src = cut(src, "\tdecider.RegisterMiddleware(decider.MiddlewareSpec{\n\t\tName: \"rampmeter-ai\"", "\t})\n", false)
	return src
}

// TestSharedAdapter derives the shared harness's adapter and checks that it
// is a Go file of package adapters that drives rampmeter without llm.
// shared-compare.sh runs it with RAMPMETER_SHARED_ADAPTER set to the path
// to write the adapter to, then hands that file to compare.sh as ADAPTER.
func TestSharedAdapter(t *testing.T) {
	src, err := os.ReadFile("adapters/rampmeter.go")
	if err != nil {
		t.Fatal(err)
	}
	out := sharedAdapter(t, string(src))
	f, err := parser.ParseFile(token.NewFileSet(), "rampmeter.go", out, parser.ImportsOnly)
	if err != nil {
		t.Fatalf("the derived adapter does not parse: %v", err)
	}
	if f.Name.Name != "adapters" {
		t.Fatalf("package %s, want adapters", f.Name.Name)
	}
	var imports []string
	for _, im := range f.Imports {
		imports = append(imports, im.Path.Value)
	}
	all := strings.Join(imports, " ")
	if !strings.Contains(all, `"benchharness/decider"`) || strings.Contains(all, "/llm\"") || strings.Contains(all, "/benchmarks/") {
		t.Fatalf("imports %s: want benchharness/decider and neither llm nor this module's packages", all)
	}
	if strings.Contains(out, "rampmeter-ai") || !strings.Contains(out, `Name: "rampmeter-limiter-mem"`) {
		t.Fatal("the derived adapter must keep the decision rows and drop rampmeter-ai")
	}
	if path := os.Getenv("RAMPMETER_SHARED_ADAPTER"); path != "" {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
