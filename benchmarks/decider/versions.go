package decider

import (
	"path/filepath"
	"runtime/debug"
	"strings"
)

// ModuleVersion returns the version of a module linked into this binary:
// "local (../)" for a module replaced by a directory (rampmeter itself),
// "(devel)" or "?" when unknown.
func ModuleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			switch {
			case d.Replace == nil:
				return d.Version
			case strings.HasPrefix(d.Replace.Path, ".") || filepath.IsAbs(d.Replace.Path): // this repository
				return "local (" + d.Replace.Path + ")"
			default:
				return d.Replace.Version + " (replaced)"
			}
		}
	}
	return "?"
}

// GoVersion is the toolchain that built the binary.
func GoVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	return bi.GoVersion
}
