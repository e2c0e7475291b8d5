package redisstore

import (
	"strings"
	"testing"
)

// TestLibrarySource checks that the script has the lines library replaces,
// so that the store can load it as a Function library at all.
func TestLibrarySource(t *testing.T) {
	if libSource == "" {
		t.Fatal("ratelimit.lua lacks the script-only line or the entry line that library replaces")
	}
	if !strings.HasPrefix(libSource, "#!lua name="+funcName+"\n") || strings.Contains(libSource, scriptOnly) ||
		strings.Contains(libSource, scriptEntry) {
		t.Fatalf("library source is not the script's body wrapped:\n%.300s", libSource)
	}
	if library("return 1\n", "x") != "" {
		t.Fatal("library accepted a script without its entry line")
	}
}
