// Package devtest holds the test helpers every module shares for finding the repository and
// what `make setup` installed.
package devtest

import (
	"os"
	"os/exec"
	"syscall"

	"path/filepath"
	"testing"
	"time"

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

// CPUTime is this process's user+system CPU time: on a shared machine it is a steadier cost
// than wall time. Benchmarks report it per operation (cpu-ms/op).
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU reports the CPU time spent since start per iteration of b, in milliseconds.
func ReportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(CPUTime()-start)/1e6/float64(b.N), "cpu-ms/op")
}

// SharedDir is a folder a test and the tools it runs can both write: open to every user (tools
// run as other users when the tests run as root) and outside /tmp, /var/tmp and /dev/shm, which
// each tool call may have its own of. It is made in the repository's .test-tmp folder and
// removed after the test.
func SharedDir(t testing.TB) string {
	t.Helper()
	parent := filepath.Join(RepoRoot(t), ".test-tmp")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, "shared-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
