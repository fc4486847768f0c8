// Package devtest holds the test helpers every module shares for finding the repository and
// what `make setup` installed.
package devtest

import (
	"os/exec"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv"
)

// RepoRoot returns the repository root or fails the test.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := devenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Missing ends a test that needs something `make setup` installs: it fails in CI (or with
// SKEIN_REQUIRE_ALL=1), so a missing install step can never pass unseen, and skips elsewhere.
func Missing(t testing.TB, what string) {
	t.Helper()
	if devenv.Required() {
		t.Fatalf("%s is missing; run `make setup` (required because CI or SKEIN_REQUIRE_ALL=1 is set)", what)
	}
	t.Skipf("%s is missing; run `make setup` to install it", what)
}

// NeedProgram ends the test (as Missing does) unless every program is on PATH.
func NeedProgram(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			Missing(t, n+" (on PATH)")
		}
	}
}
