package toon

import (
	"os"
	"path/filepath"
	"testing"
)

// requireAll reports whether tests must fail instead of skipping when
// something `make setup` installs is missing.
func requireAll() bool {
	return os.Getenv("CI") != "" || os.Getenv("SKEIN_REQUIRE_ALL") == "1"
}

func missingSetup(t testing.TB, what string) {
	t.Helper()
	if requireAll() {
		t.Fatalf("%s is missing; run `make setup` (required because CI or SKEIN_REQUIRE_ALL=1 is set)", what)
	}
	t.Skipf("%s is missing; run `make setup` to install it", what)
}

func repoRoot(t testing.TB) string {
	t.Helper()
	if r := os.Getenv("SKEIN_REPO_ROOT"); r != "" {
		return r
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("cannot find the repository root (no go.work above the test directory)")
		}
		dir = parent
	}
}

func toolsDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("SKEIN_TOOLS_DIR"); d != "" {
		return d
	}
	return filepath.Join(repoRoot(t), ".tools")
}

// nodeModules is where mk/toon.mk installs the pinned npm packages.
func nodeModules(t testing.TB) string {
	return filepath.Join(toolsDir(t), "node", "node_modules")
}
