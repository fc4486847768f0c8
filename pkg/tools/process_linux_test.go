//go:build linux

package tools_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/tools"
)

// A long-lived process gets what a call gets from the sandbox (its user, its limits, a scrubbed
// environment with the spec's variables, a scratch HOME), talks over its pipes for as long as it
// runs, and Stop ends it with everything it started and frees its scratch folder.
func TestStartProcessRunsUnderTheSandboxUntilStopped(t *testing.T) {
	t.Setenv("SKEIN_TEST_PROVIDER_KEY", "sk-must-not-leak-0123456789")
	dir := openTempDir(t)
	pidFile := filepath.Join(dir, "child.pid")
	// Prints what it sees, leaves a child in the background, then echoes lines until stdin ends.
	script := `echo "uid=$(id -u) home=$HOME pwd=$(pwd) key=${SKEIN_TEST_PROVIDER_KEY:-none} extra=$EXTRA nofile=$(ulimit -n)"
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
	wantUID := strconv.Itoa(os.Getuid())
	if os.Geteuid() == 0 {
		wantUID = "65534" // nobody
	}
	if fields["uid"] != wantUID {
		t.Errorf("uid %s, want %s", fields["uid"], wantUID)
	}
	if fields["key"] != "none" || fields["extra"] != "given" || fields["nofile"] != "77" {
		t.Errorf("environment or limits not the sandbox's: %s", first)
	}
	home := fields["home"]
	if home == "" || home != fields["pwd"] || !strings.Contains(home, "skein-tool-echoer-") {
		t.Errorf("HOME and cwd should be the process's scratch folder: %s", first)
	}
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
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Errorf("scratch folder %s left after Stop: %v", home, err)
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
