// Package devenv finds what `make setup` installs: the repository root and the tools folder
// (.tools) that holds the Python venv, npm packages, ONNX Runtime and the model weights.
package devenv

import (
	"errors"
	"os"
	"path/filepath"
)

// ErrNoRepo is returned when no go.work is found above the working directory.
var ErrNoRepo = errors.New("no go.work above the working directory (set SKEIN_REPO_ROOT)")

// RepoRoot is $SKEIN_REPO_ROOT, or the folder holding the go.work found walking up from the
// working directory (tests run inside the repository).
func RepoRoot() (string, error) {
	if r := os.Getenv("SKEIN_REPO_ROOT"); r != "" {
		return r, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", ErrNoRepo
		}
	}
}

// ToolsDir is $SKEIN_TOOLS_DIR; or .tools in the repository root; or .tools in the folder above
// the running binary (`make build` puts binaries in bin/, so bin/skein works from any folder);
// or the user's install (UserDir, written by `skein setup`). It returns "" when none exists.
func ToolsDir() string {
	if d := os.Getenv("SKEIN_TOOLS_DIR"); d != "" {
		return d
	}
	if root, err := RepoRoot(); err == nil {
		return filepath.Join(root, ".tools")
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			d := filepath.Join(filepath.Dir(filepath.Dir(exe)), ".tools")
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				return d
			}
		}
	}
	if d := UserDir(); d != "" {
		if st, err := os.Stat(filepath.Join(d, "memory")); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// UserDir is where `skein setup` installs what memory needs for this user, so a skein binary
// anywhere finds it: $XDG_CACHE_HOME/skein (by default ~/.cache/skein). "" when the user has no
// cache folder.
func UserDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "skein")
}

// Required reports whether tests must fail, not skip, when something `make setup` installs is
// missing: always in CI, and wherever SKEIN_REQUIRE_ALL=1.
func Required() bool {
	return os.Getenv("CI") != "" || os.Getenv("SKEIN_REQUIRE_ALL") == "1"
}
