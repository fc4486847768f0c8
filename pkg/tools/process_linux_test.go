//go:build linux

package tools_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/pkg/tools/uidrange"
)

// A long-lived process gets what a call gets from the sandbox (a uid of its own for its whole
// life when the host is root, its limits, no_new_privs and the seccomp filter, a scrubbed
// environment with the spec's variables, a scratch HOME that is its own /tmp where calls get
// one), talks over its pipes for as long as it runs, and Stop ends it with everything it started
// and frees its scratch folder.
func TestStartProcessRunsUnderTheSandboxUntilStopped(t *testing.T) {
	t.Setenv("SKEIN_TEST_PROVIDER_KEY", "sk-must-not-leak-0123456789")
	dir := devtest.SharedDir(t)
	pidFile := filepath.Join(dir, "child.pid")
	// Prints what it sees, leaves a child in the background, then echoes lines until stdin ends.
	script := `echo "uid=$(id -u) home=$HOME pwd=$(pwd) key=${SKEIN_TEST_PROVIDER_KEY:-none} extra=$EXTRA nofile=$(ulimit -n) $(grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -d ' \t' | tr ':\n' '= ')"
touch "$HOME/state"; sleep 1000 & echo $! > ` + pidFile + `
while read -r line; do echo "got $line"; done`
	var r tools.Runner
	r.Sandbox.Limits.OpenFiles = 77
	p, err := r.StartProcess(tools.ProcessSpec{Name: "echoer", Command: []string{"/bin/sh", "-c", script},
		Env: []string{"EXTRA=given"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	out := bufio.NewReader(p.Stdout)
	first, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("first line: %v (stderr %q)", err, p.Stderr())
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(first) {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	uid, _ := strconv.Atoi(fields["uid"])
	if os.Geteuid() == 0 {
		first, n, _ := uidrange.Parse(tools.DefaultUIDs)
		if uid < first || uid >= first+n {
			t.Errorf("uid %d, want one of the pool's %s", uid, tools.DefaultUIDs)
		}
		// The uid is the process's own while it runs: a second process gets another.
		q, err := r.StartProcess(tools.ProcessSpec{Name: "other", Command: []string{"/bin/sh", "-c", "id -u; cat"}})
		if err != nil {
			t.Fatal(err)
		}
		other, err := bufio.NewReader(q.Stdout).ReadString('\n')
		q.Stop()
		if err != nil || strings.TrimSpace(other) == fields["uid"] {
			t.Errorf("two live processes share uid %s (%v)", fields["uid"], err)
		}
	} else if uid != os.Getuid() {
		t.Errorf("uid %d, want the host's %d", uid, os.Getuid())
	}
	if fields["key"] != "none" || fields["extra"] != "given" || fields["nofile"] != "77" ||
		fields["NoNewPrivs"] != "1" || fields["Seccomp"] != "2" {
		t.Errorf("environment or limits not the sandbox's: %s", first)
	}
	home := fields["home"]
	wantHome := "/tmp" // its scratch folder, mounted as its own /tmp
	if !privateTmp(t) {
		wantHome = p.ScratchDir()
	}
	if home != wantHome || home != fields["pwd"] || !strings.Contains(p.ScratchDir(), "echoer") {
		t.Errorf("HOME and cwd should be the process's scratch folder %s (%s): %s", p.ScratchDir(), wantHome, first)
	}
	scratch := p.ScratchDir()
	for _, msg := range []string{"one", "two"} {
		if _, err := p.Stdin.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
		if got, err := out.ReadString('\n'); err != nil || got != "got "+msg+"\n" {
			t.Fatalf("reply to %q: %q, %v", msg, got, err)
		}
	}
	if p.Exit() != "" {
		t.Fatalf("Exit while running: %q", p.Exit())
	}
	child := readPID(t, pidFile)
	p.Stop()
	assertGone(t, child)
	// The process left a file there; an empty folder would be kept for the next start.
	if _, err := os.Stat(scratch); !os.IsNotExist(err) {
		t.Errorf("scratch folder %s left after Stop: %v", scratch, err)
	}
	if !strings.Contains(p.Exit(), "killed by signal") {
		t.Errorf("Exit after Stop: %q", p.Exit())
	}
}

// A process that dies by itself says how, with the last line of its stderr.
func TestStartProcessSaysWhyItEnded(t *testing.T) {
	var r tools.Runner
	p, err := r.StartProcess(tools.ProcessSpec{Name: "crasher", Command: []string{"/bin/sh", "-c", "echo 'listen: address in use' >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	<-p.Done()
	p.Stop() // drains stderr
	if got := p.Exit(); got != "exited with status 3: listen: address in use" {
		t.Errorf("Exit = %q", got)
	}
	if _, err := r.StartProcess(tools.ProcessSpec{Name: "missing", Command: []string{"no-such-program-xyz"}}); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Errorf("a missing program: %v", err)
	}
}
