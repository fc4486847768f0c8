package devtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// built is every program Build built in this test process, in one folder.
var built struct {
	sync.Mutex
	dir  string
	bins map[string]string
	errs map[string]error
}

// Build builds the repository's program in folder pkg ("toolhost/cmd/toolhost": its module's
// folder, then the package within it) once per test process and returns the binary's path. A
// test that runs another role uses it to run that role as the process it is deployed as, so its
// module need not require the other role's module. Every program goes into one folder, which
// tools running as another user can reach (a toolhost finds skein-tool-sandbox beside it when
// both are built); call RemoveBuilt from TestMain to delete it.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if bin, ok := built.bins[pkg]; ok {
		return bin
	}
	if err, ok := built.errs[pkg]; ok {
		t.Fatal(err)
	}
	bin, err := build(RepoRoot(t), pkg)
	if err != nil {
		if built.errs == nil {
			built.errs = map[string]error{}
		}
		built.errs[pkg] = err
		t.Fatal(err)
	}
	if built.bins == nil {
		built.bins = map[string]string{}
	}
	built.bins[pkg] = bin
	return bin
}

func build(root, pkg string) (string, error) {
	if built.dir == "" {
		// In the repository's .test-tmp, not the temp folder: each tool call has its own /tmp,
		// where it would not find the trampoline (skein-tool-sandbox) beside the toolhost.
		parent := filepath.Join(root, ".test-tmp")
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return "", err
		}
		dir, err := os.MkdirTemp(parent, "bin-")
		if err != nil {
			return "", err
		}
		// Tools run as another user where tests run as root, and must reach the trampoline.
		if err := os.Chmod(dir, 0o755); err != nil {
			return "", err
		}
		built.dir = dir
	}
	module, rel, ok := strings.Cut(pkg, "/")
	if !ok {
		return "", fmt.Errorf("build %s: want <module folder>/<package folder>", pkg)
	}
	bin := filepath.Join(built.dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, "./"+rel)
	cmd.Dir = filepath.Join(root, module)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// RemoveBuilt deletes what Build built (half a gigabyte for every role; it piles up in
// .test-tmp otherwise).
func RemoveBuilt() {
	built.Lock()
	defer built.Unlock()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	built.dir, built.bins, built.errs = "", nil, nil
}
