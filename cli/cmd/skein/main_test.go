package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/spf13/cobra"
)

// skeinMain runs the whole command line in this process, as main does, in a fresh folder with
// its own $SKEIN_HOME, and returns what it printed and its exit status.
func skeinMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root, out, errOut := skeinCmd(args...)
	code = execute(context.Background(), root, errOut)
	return out.String(), errOut.String(), code
}

// skeinCmd is the whole command tree, as main makes it, set to run args and print into out and
// errOut.
func skeinCmd(args ...string) (root *cobra.Command, out, errOut *bytes.Buffer) {
	root, out, errOut = newRoot(), &bytes.Buffer{}, &bytes.Buffer{}
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetArgs(args)
	return root, out, errOut
}

// runSkein runs `skein args...` in this process on the whole command tree, within limit, and
// returns what it printed and its error. set, when given, changes the command before it runs
// (its input, a terminal for its output).
func runSkein(t *testing.T, limit time.Duration, set func(*cobra.Command), args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root, out, errOut := skeinCmd(args...)
	if set != nil {
		set(root)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func TestVersion(t *testing.T) {
	t.Chdir(t.TempDir())
	out, errOut, code := skeinMain(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "skein ") || !strings.Contains(out, "go1.") || errOut != "" {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = skeinMain(t, "--version", "--json")
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("--version --json: exit %d, %v: %q", code, err, out)
	}
	for _, k := range []string{"version", "commit", "commit_time", "modified", "go"} {
		if _, ok := v[k]; !ok {
			t.Errorf("--version --json has no %q: %s", k, out)
		}
	}
	if v["version"] == "" {
		t.Errorf("empty version: %s", out)
	}
	old := version
	version = "v9.8.7"
	t.Cleanup(func() { version = old })
	if out, _, _ := skeinMain(t, "--version"); !strings.HasPrefix(out, "skein v9.8.7 ") {
		t.Errorf("the version linked in by make is not the one printed: %q", out)
	}
}

// Each class of failure has its own exit status (docs/json.md, "Exit status"), so a script can
// tell a typo from a broken config from a mesh that is not there.
func TestExitStatusPerClass(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("SKEIN_HOME", filepath.Join(dir, "home"))
	t.Setenv("SKEIN_NATS_URL", "")
	if err := os.WriteFile("bad.yaml", []byte("agent:\n  colour: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"bogus"}, protocol.ExitUsage, `unknown command "bogus"`},
		{[]string{"trace", "lsit"}, protocol.ExitUsage, `did you mean "list"`},
		{[]string{"trace", "show"}, protocol.ExitUsage, "accepts 1 arg"},
		{[]string{"run", "--no-such-flag", "x"}, protocol.ExitUsage, "unknown flag"},
		{[]string{"usage", "--by", "colour"}, protocol.ExitUsage, "--by must be"},
		{[]string{"run", "--budget", "colour=red", "x"}, protocol.ExitUsage, "--budget"},
		{[]string{"up", "--roles", "executor,bogus"}, protocol.ExitUsage, `unknown role "bogus"`},
		{[]string{"up", "--roles", "executor", "--http", "127.0.0.1:0"}, protocol.ExitUsage, "no gateway"},
		{[]string{"server", "--nats", "nats://127.0.0.1:4222"}, protocol.ExitUsage, "--nats is for"},
		{[]string{"run", "--config", "bad.yaml", "x"}, protocol.ExitConfig, "agent.colour"},
		{[]string{"up", "--config", "bad.yaml"}, protocol.ExitConfig, "agent.colour"},
		{[]string{"trace", "list"}, protocol.ExitUnavailable, "skein up"},
	} {
		_, errOut, code := skeinMain(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.says) {
			t.Errorf("skein %v: exit %d, stderr %q; want %d saying %q", c.args, code, errOut, c.code, c.says)
		}
	}
	if out, _, code := skeinMain(t); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("skein alone: exit %d; want the help and 0", code)
	}
	if out, _, code := skeinMain(t, "trace"); code != 0 || !strings.Contains(out, "tail") {
		t.Errorf("skein trace alone: exit %d; want its help and 0", code)
	}
}

// Errors from the mesh carry their class to the exit status through the code table.
func TestExitStatusOfMeshErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
	}{
		{fmt.Errorf("submit: %w", protocol.Errorf(protocol.CodeStorageFull, "disk full")), protocol.ExitTempFail},
		{protocol.Errorf(protocol.CodeRejected, "empty task"), protocol.ExitDataErr},
		{protocol.Errorf(protocol.CodeNotFound, "no trace for session x"), protocol.ExitNotFound},
		{&bus.AuthError{}, protocol.ExitNoPerm},
		{&config.Error{File: "a.yaml", Msg: "bad"}, protocol.ExitConfig},
		{fmt.Errorf("surprise"), protocol.ExitInternal},
		{context.DeadlineExceeded, protocol.ExitTempFail},
	} {
		if code, _ := exitStatus(c.err); code != c.code {
			t.Errorf("exit status of %v: %d, want %d", c.err, code, c.code)
		}
	}
}

// A command that reads the mesh finds the one running on $SKEIN_HOME, or the state a past run
// left there; with neither it says how to get a mesh and creates nothing.
func TestReadOnlyCommandsFindTheMeshOrSaySo(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	home := filepath.Join(dir, "home")
	t.Setenv("SKEIN_HOME", home)
	t.Setenv("SKEIN_NATS_URL", "")
	for _, args := range [][]string{{"trace", "list"}, {"usage"}, {"dlq"}, {"memory", "list"}, {"inspect-memory"}, {"trace", "show", "s-1"}} {
		out, errOut, code := skeinMain(t, args...)
		if code != protocol.ExitUnavailable || out != "" || !strings.Contains(errOut, "skein up") || !strings.Contains(errOut, "--nats") {
			t.Errorf("skein %v without a mesh: exit %d, stdout %q, stderr %q; want %d saying how to start one", args, code, out, errOut, protocol.ExitUnavailable)
		}
	}
	for _, p := range []string{home, ".skein"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a read without a mesh created %s", p)
		}
	}

	// A mesh running on the home: the command connects to it (a second server on the same
	// files would be refused, exit 64).
	m, err := startServer(context.Background(), config.Default(), home, "127.0.0.1:0", meshLogger())
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := skeinMain(t, "trace", "list")
	if code != 0 || !strings.Contains(out, "no sessions") {
		t.Errorf("trace list with a mesh running on the home: exit %d, %q %q", code, out, errOut)
	}
	m.stop()

	// No mesh running, but the state it left: read in this process.
	out, errOut, code = skeinMain(t, "trace", "list")
	if code != 0 || !strings.Contains(out, "no sessions") {
		t.Errorf("trace list of a stopped mesh's state: exit %d, %q %q", code, out, errOut)
	}
}

// The scaffolded files point to a command for the script format; that command prints it.
func TestScaffoldPointsToTheScriptFormat(t *testing.T) {
	t.Chdir(t.TempDir())
	pointer := regexp.MustCompile("`(skein [^`]+)`")
	for _, f := range []string{"scaffold/agent.offline.yaml", "scaffold/script.yaml"} {
		b, err := scaffoldFS.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := pointer.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s names no command for the script format", f)
			continue
		}
		args := strings.Fields(string(m[1]))[1:]
		out, errOut, code := skeinMain(t, args...)
		for _, want := range []string{"rules:", "when", "tool_calls", "args_raw", "times", "delay_s", "finish"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("%s points to `%s`, which prints no %q (exit %d):\n%s%s", f, m[1], want, code, out, errOut)
			}
		}
	}
	if out, _, _ := skeinMain(t, "run", "--help"); !strings.Contains(out, "skein help script") || !strings.Contains(out, "Exit status") {
		t.Errorf("run --help does not point to the script format and the exit statuses:\n%s", out)
	}
}

// The summary of a run counts model turns, and points to its trace in a way that works where it
// was printed: the files when they are on this machine, else the command with the --nats given.
func TestRunSummarySaysTurnsAndWhereTheTraceIs(t *testing.T) {
	home := t.TempDir()
	res := runResult{SessionID: "s-1", Outcome: "success", Usage: runUsage{Turns: 3, Steps: 3}}
	var b bytes.Buffer
	printResult(&b, res, home, "nats://a:4222", false)
	out := b.String()
	if !strings.Contains(out, "3 turn(s)") || strings.Contains(out, "step") {
		t.Errorf("summary %q; want 3 turn(s) and no steps", out)
	}
	if !strings.Contains(out, "trace: skein trace show --nats nats://a:4222 s-1\n") || strings.Contains(out, "files:") {
		t.Errorf("summary %q; want the trace command with --nats and no file that is not here", out)
	}
	if err := os.MkdirAll(filepath.Join(home, "traces"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "traces", "s-1.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	printResult(&b, res, home, "", false)
	if out := b.String(); !strings.Contains(out, "trace: skein trace show s-1  (files: "+filepath.Join(home, "traces", "s-1.jsonl")) {
		t.Errorf("summary %q; want the files that are here", out)
	}
}

// A role of `skein up` that stops with an error stops the whole process, with a role binary's
// exit status, instead of leaving the other roles up without it (here the gateway, whose HTTP
// address is taken).
func TestUpStopsWhenARoleStops(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("SKEIN_HOME", filepath.Join(dir, "home"))
	t.Setenv("SKEIN_NATS_URL", "")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	// A guard against a hang, far above the time the mesh takes to start: not a timing target.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, out, errOut := skeinCmd("up", "--roles", "gateway,planner", "--listen", "127.0.0.1:0", "--http", taken.Addr().String())
	code := execute(ctx, root, errOut)
	if ctx.Err() != nil {
		t.Fatalf("skein up ran on without its gateway until the test's guard; stdout %q, stderr %q", out.String(), errOut.String())
	}
	if code != protocol.ExitInternal || !strings.Contains(errOut.String(), "the gateway stopped") || !strings.Contains(errOut.String(), "address already in use") {
		t.Errorf("skein up with its gateway stopped: exit %d, stderr %q; want %d naming the gateway and why", code, errOut.String(), protocol.ExitInternal)
	}
}
