package tools_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/tools"
)

var (
	fixturesOnce sync.Once
	fixtures     map[string]*tools.Tool
	fixturesErr  error
)

// fixture returns a fresh copy of one tool from testdata/tools, so a test may adjust it.
func fixture(t *testing.T, name string) *tools.Tool {
	t.Helper()
	fixturesOnce.Do(func() {
		ts, err := tools.LoadDir("testdata/tools")
		fixtures, fixturesErr = map[string]*tools.Tool{}, err
		for _, tl := range ts {
			fixtures[tl.Name] = tl
		}
	})
	if fixturesErr != nil {
		t.Fatalf("load fixtures: %v", fixturesErr)
	}
	tl, ok := fixtures[name]
	if !ok {
		t.Fatalf("no fixture tool %q", name)
	}
	cp := *tl
	cp.Argv = append([]string(nil), tl.Argv...)
	if tl.Argv[0] == "python3" || tl.Argv[0] == "node" {
		devtest.NeedProgram(t, tl.Argv[0])
	}
	return &cp
}

// readPID waits for a tool to have written a pid file.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var b []byte
	poll.Eventually(t, 10*time.Second, "the tool's pid file "+path, func() (err error) {
		b, err = os.ReadFile(path)
		return err
	})
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		t.Fatalf("pid file %s: %v", path, err)
	}
	return pid
}

// assertGone waits for pid to have stopped running: gone, or a zombie waiting for a parent
// that does not reap (PID 1 in some containers does not).
func assertGone(t *testing.T, pid int) {
	t.Helper()
	err := poll.Wait(10*time.Second, func() error {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) || isZombie(pid) {
			return nil
		}
		return errors.New("still running")
	})
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d is still running after the call ended", pid)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name: "pid (comm) S ...".
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// privateTmp reports whether a default Runner gives each call its own /tmp here.
func privateTmp(t testing.TB) bool {
	t.Helper()
	var r tools.Runner
	info, err := r.SandboxInfo()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(info, "own /tmp")
}
