package benchmarks_test

import (
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

// TestSharedAdapterInSync fails when testdata/compare-sh/rampmeter.go (what
// ADAPTER= hands ../shared/bench/compare.sh) no longer matches
// adapters/rampmeter.go. Regenerate it with
//
//	RAMPMETER_WRITE_SHARED_ADAPTER=1 go test -run TestSharedAdapterInSync .
func TestSharedAdapterInSync(t *testing.T) {
	const path = "testdata/compare-sh/rampmeter.go"
	src, err := os.ReadFile("adapters/rampmeter.go")
	if err != nil {
		t.Fatal(err)
	}
	want := sharedAdapter(t, string(src))
	header := "package adapters\n\n" +
		"// This file is the rampmeter adapter for the shared harness ../shared/bench\n" +
		"// (module benchharness), generated from ../../adapters/rampmeter.go by\n" +
		"// TestSharedAdapterInSync: the same rows without rampmeter-ai (that harness\n" +
		"// sends no request bodies). From the repository root:\n" +
		"//\n" +
		"//\tADAPTER=$PWD/benchmarks/testdata/compare-sh/rampmeter.go ../shared/bench/compare.sh\n" +
		"//\n" +
		"// It lives under testdata/ so that the go tool never builds it here.\n"
	want = strings.Replace(want, "package adapters\n", header, 1)
	if os.Getenv("RAMPMETER_WRITE_SHARED_ADAPTER") != "" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is out of date with adapters/rampmeter.go; regenerate it with RAMPMETER_WRITE_SHARED_ADAPTER=1 go test -run TestSharedAdapterInSync .", path)
	}
}
