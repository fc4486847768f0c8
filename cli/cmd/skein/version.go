package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at link time by `make build` (mk/build.mk: -X main.version=$(git describe));
// a binary built otherwise reads what the Go toolchain stamped into it (see buildVersion).
var version string

// versionInfo is `skein --version --json`.
type versionInfo struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`      // "" when the build did not record it
	CommitTime string `json:"commit_time"` // RFC 3339, "" when not recorded
	Modified   bool   `json:"modified"`    // built from a checkout with uncommitted changes
	Go         string `json:"go"`
}

// buildVersion is this binary's version: the one linked in by make, else the module version
// `go install …@vX` records, else the commit the toolchain stamped from the checkout (with
// "-dirty" when it had changes), else "devel".
func buildVersion() versionInfo {
	v := versionInfo{Version: version, Go: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if v.Version == "" {
			v.Version = "devel"
		}
		return v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if v.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v.Version = info.Main.Version
	}
	if v.Version == "" && v.Commit != "" {
		v.Version = v.Commit[:min(12, len(v.Commit))]
		if v.Modified {
			v.Version += "-dirty"
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	return v
}

func printVersion(w io.Writer, asJSON bool) error {
	v := buildVersion()
	if asJSON {
		return writeJSON(w, v)
	}
	_, err := fmt.Fprintf(w, "skein %s (%s)\n", v.Version, v.Go)
	return err
}
