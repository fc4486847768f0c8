package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
)

func run(t *testing.T, tl *tools.Tool, args string) protocol.ToolResult {
	t.Helper()
	var r tools.Runner
	return r.Run(context.Background(), tl, json.RawMessage(args))
}

func wantFail(t *testing.T, res protocol.ToolResult, kind string, errHas ...string) {
	t.Helper()
	if res.OK || res.Kind != kind {
		t.Fatalf("want failure kind %q, got ok=%v kind=%q error=%q stderr=%q", kind, res.OK, res.Kind, res.Error, res.Stderr)
	}
	for _, s := range errHas {
		if !strings.Contains(res.Error, s) {
			t.Errorf("error %q does not contain %q", res.Error, s)
		}
	}
}

func TestInvalidArgumentsAreRefusedBeforeTheProcessStarts(t *testing.T) {
	// The program does not exist: had the runner tried to start it, the kind would be
	// cannot_start. invalid_arguments proves validation comes first.
	tl := fixture(t, "missing")
	cases := map[string][]string{
		`{}`:                           {"at '': missing property 'city'"},
		`{"city": 3}`:                  {"at '/city'", "want string"},
		`{"city": "Oslo", "days": 0}`:  {"at '/days'", "minimum"},
		`{"city": "Oslo", "extra": 1}`: {"extra"},
		`not json`:                     {"not valid JSON"},
		`[1]`:                          {"want object"},
	}
	for args, want := range cases {
		t.Run(args, func(t *testing.T) {
			wantFail(t, run(t, tl, args), protocol.ToolErrBadArgs, want...)
		})
	}
	wantFail(t, run(t, tl, `{"city": "Oslo"}`), protocol.ToolErrStart, "does-not-exist", "does not exist")
}

func TestCannotStart(t *testing.T) {
	wantFail(t, run(t, fixture(t, "noexec"), `{}`), protocol.ToolErrStart, "not executable")
	tl := fixture(t, "plain")
	tl.Argv = []string{"skein-no-such-program-anywhere"}
	wantFail(t, run(t, tl, `{}`), protocol.ToolErrStart, "not found on", "PATH")
}

func TestTimeoutKillsTheWholeProcessGroup(t *testing.T) {
	pidfile := filepath.Join(devtest.SharedDir(t), "grandchild.pid")
	t.Setenv("SKEIN_TEST_PIDFILE", pidfile)
	tl := fixture(t, "sleeper")
	tl.TimeoutS = 2 // room for a slow start; the tool would otherwise run 300s
	res := run(t, tl, `{}`)
	wantFail(t, res, protocol.ToolErrTimeout, "timed out after 2s", "process group was killed")
	assertGone(t, readPID(t, pidfile))
}

func TestBackgroundProcessesDoNotOutliveTheCall(t *testing.T) {
	pidfile := filepath.Join(devtest.SharedDir(t), "straggler.pid")
	t.Setenv("SKEIN_TEST_PIDFILE", pidfile)
	res := run(t, fixture(t, "straggler"), `{}`)
	if !res.OK || string(res.Result) != `"done"` {
		t.Fatalf("want ok \"done\", got %+v", res)
	}
	assertGone(t, readPID(t, pidfile))
}

func TestMalformedOutputIsCheckedBeforeTheExitCode(t *testing.T) {
	res := run(t, fixture(t, "malformed"), `{}`)
	wantFail(t, res, protocol.ToolErrMalformed, "not one JSON value", `"this is not json`, "exited with status 1")
	wantFail(t, run(t, fixture(t, "empty"), `{}`), protocol.ToolErrMalformed, "printed nothing")
}

func TestNonZeroExitKeepsTheToolsOwnErrorAndJSON(t *testing.T) {
	res := run(t, fixture(t, "failjson"), `{}`)
	wantFail(t, res, protocol.ToolErrExit, "disk quota exceeded on /data", "exited with status 3")
	if string(res.Result) != `{"written":0}` {
		t.Errorf("result = %s, want the tool's own result", res.Result)
	}
	if !strings.Contains(res.Stderr, "write failed") {
		t.Errorf("stderr tail %q lacks the tool's stderr", res.Stderr)
	}
}

func TestNonZeroExitWithoutJSONSurfacesTheLastStderrLine(t *testing.T) {
	res := run(t, fixture(t, "broken"), `{}`)
	wantFail(t, res, protocol.ToolErrExit, "ZeroDivisionError: division by zero", "exited with status 1")
	if !strings.Contains(res.Stderr, "Traceback") || !strings.Contains(res.Stderr, "about to divide") {
		t.Errorf("stderr %q lacks the traceback", res.Stderr)
	}
	wantFail(t, run(t, fixture(t, "signaled"), `{}`), protocol.ToolErrExit, "killed by signal")
}

func TestStderrIsATailCappedAt2KiB(t *testing.T) {
	res := run(t, fixture(t, "noisy"), `{}`)
	wantFail(t, res, protocol.ToolErrExit, "upstream refused the request")
	if len(res.Stderr) > tools.DefaultStderrTail+len("…") {
		t.Errorf("stderr is %d bytes, want at most %d", len(res.Stderr), tools.DefaultStderrTail)
	}
	if !strings.HasPrefix(res.Stderr, "…") || !strings.HasSuffix(strings.TrimSpace(res.Stderr), "FATAL: ran out of retries") {
		t.Errorf("stderr should be the marked tail of the output, got %q", res.Stderr)
	}
}

func TestOutputOverTheCapIsStopped(t *testing.T) {
	// flood writes forever: only the cap ends it, well before the 30s default timeout.
	res := run(t, fixture(t, "flood"), `{}`)
	wantFail(t, res, protocol.ToolErrTooLarge, "4096-byte cap")
	if !res.Truncated || res.Result != nil {
		t.Errorf("want truncated with no partial result, got %+v", res)
	}
}

func TestToolErrorOnExitZero(t *testing.T) {
	res := run(t, fixture(t, "toolerr"), `{}`)
	wantFail(t, res, protocol.ToolErrToolError)
	if res.Error != "no such city: Atlantis" {
		t.Errorf("error = %q, want the tool's message as is", res.Error)
	}
}

func TestResultShapes(t *testing.T) {
	for name, want := range map[string]string{
		"plain":   `[1,2,3]`,     // not an envelope: the value is the result
		"okextra": `{"count":3}`, // an envelope without result: its other fields are the result
	} {
		res := run(t, fixture(t, name), `{}`)
		if !res.OK || res.Kind != "" || string(res.Result) != want {
			t.Errorf("%s: got %+v, want ok with result %s", name, res, want)
		}
	}
}

func TestArgumentsArriveOnStdinAndToolRunsInAScratchFolder(t *testing.T) {
	tl := fixture(t, "stdincopy")
	var r tools.Runner
	p := r.Prepare(context.Background(), tl, json.RawMessage(`{"n": 7}`))
	scratch := p.ScratchDir()
	res := p.Run(context.Background())
	p.Close()
	var got struct {
		Args   map[string]int `json:"args"`
		Cwd    string         `json:"cwd"`
		Home   string         `json:"home"`
		TmpDir string         `json:"tmpdir"`
	}
	if !res.OK || json.Unmarshal(res.Result, &got) != nil {
		t.Fatalf("got %+v", res)
	}
	// Where the call has its own /tmp, its scratch folder is that /tmp; elsewhere the tool sees
	// it where the host made it.
	want := scratch
	if privateTmp(t) {
		want = "/tmp"
	}
	if got.Args["n"] != 7 || !strings.Contains(filepath.Base(scratch), "skein-tool-stdincopy-") || got.Cwd != want || got.Home != want || got.TmpDir != want {
		t.Errorf("got args %v in %s (HOME %s, TMPDIR %s), want n=7 in the per-call scratch folder %s, also HOME and TMPDIR", got.Args, got.Cwd, got.Home, got.TmpDir, want)
	}
	if ents, err := os.ReadDir(scratch); err == nil && len(ents) > 0 {
		t.Errorf("scratch folder %s outlived the call with %d entries", scratch, len(ents))
	}
	// A manifest may ask for its own folder and the host's HOME.
	tl.Sandbox = &tools.ManifestSandbox{Workdir: "tool", Home: "host"}
	t.Setenv("HOME", "/nonexistent-home")
	res = run(t, tl, `{"n": 1}`)
	if !res.OK || json.Unmarshal(res.Result, &got) != nil {
		t.Fatalf("got %+v", res)
	}
	if got.Cwd != tl.Dir || got.Home != "/nonexistent-home" {
		t.Errorf("workdir tool, home host: ran in %s with HOME %s, want %s and the host's HOME", got.Cwd, got.Home, tl.Dir)
	}
	// No arguments at all count as {}.
	if res := run(t, tl, ``); !res.OK || !strings.Contains(string(res.Result), `"args":{}`) {
		t.Errorf("empty args: %+v", res)
	}
}

func TestEnvironmentIsScrubbed(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
	t.Setenv("OPENAI_API_KEY", "sk-openai-secret")
	t.Setenv("SECRET_X", "hunter2")
	t.Setenv("SKEIN_TEST_ALLOWED", "visible")
	t.Setenv("LANG", "C.UTF-8")
	res := run(t, fixture(t, "envdump"), `{}`)
	var env map[string]string
	if !res.OK || json.Unmarshal(res.Result, &env) != nil {
		t.Fatalf("got %+v", res)
	}
	for _, k := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "SECRET_X"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s reached the tool", k)
		}
	}
	if env["SKEIN_TEST_ALLOWED"] != "visible" || env["LANG"] != "C.UTF-8" || env["PATH"] == "" {
		t.Errorf("allowed variables missing: %v", env)
	}
	allowed := map[string]bool{"SKEIN_TEST_ALLOWED": true, tools.SandboxEnvVar: true}
	for _, k := range tools.BaseEnv {
		allowed[k] = true
	}
	for k := range env {
		if !allowed[k] {
			t.Errorf("unexpected variable %s reached the tool", k)
		}
	}
}

func TestCancelledContextKillsTheTool(t *testing.T) {
	pidfile := filepath.Join(devtest.SharedDir(t), "grandchild.pid")
	t.Setenv("SKEIN_TEST_PIDFILE", pidfile)
	tl := fixture(t, "sleeper")
	tl.TimeoutS = 600
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan protocol.ToolResult, 1)
	go func() {
		var r tools.Runner
		done <- r.Run(ctx, tl, json.RawMessage(`{}`))
	}()
	pid := readPID(t, pidfile)
	cancel()
	wantFail(t, <-done, protocol.ToolErrTimeout, "abandoned")
	assertGone(t, pid)
}

func TestAPreparedCallKeepsItsScratchFolderUntilClosedAndRunsOnce(t *testing.T) {
	tl := fixture(t, "stdincopy")
	var r tools.Runner
	p := r.Prepare(context.Background(), tl, json.RawMessage(`{"n": 3}`))
	scratch := p.ScratchDir()
	res := p.Run(context.Background())
	var got struct {
		Args map[string]int `json:"args"`
	}
	if !res.OK || json.Unmarshal(res.Result, &got) != nil || got.Args["n"] != 3 {
		t.Fatalf("got %+v", res)
	}
	// The host answers first and cleans up after: the folder is still there until Close.
	if _, err := os.Stat(scratch); err != nil {
		t.Errorf("scratch folder gone before Close: %v", err)
	}
	wantFail(t, p.Run(context.Background()), protocol.ToolErrStart, "already ran")
	p.Close()
	if ents, err := os.ReadDir(scratch); err == nil && len(ents) > 0 {
		t.Errorf("scratch folder %s outlived Close with %d entries", scratch, len(ents))
	}

	// A call prepared and never run (its id was found already recorded) leaves nothing behind
	// but its empty folder, kept for the next call.
	parent := t.TempDir()
	r2 := tools.Runner{Sandbox: tools.Sandbox{ScratchDir: parent}}
	unused := r2.Prepare(context.Background(), tl, json.RawMessage(`{}`))
	base := filepath.Join(parent, tools.ScratchBaseName(os.Getpid()))
	if ents, _ := os.ReadDir(base); len(ents) != 1 {
		t.Fatalf("prepared call made %d scratch folders, want 1", len(ents))
	}
	unused.Close()
	if ents, _ := os.ReadDir(base); len(ents) > 1 {
		t.Errorf("%d scratch folders left after Close of a call never run", len(ents))
	}
	// One that cannot start says why when run.
	bad := r2.Prepare(context.Background(), tl, json.RawMessage(`[1]`))
	defer bad.Close()
	if res := bad.Run(context.Background()); res.OK || res.Kind != protocol.ToolErrBadArgs {
		t.Errorf("bad arguments: %+v", res)
	}
}

// Making and removing a folder is most of a scratch folder's cost on a disk file system, so a
// folder its tool left empty serves the next call of the same tool. One with anything in it, or
// whose mode changed, is removed instead, and the host keeps no more folders than its calls held
// at once.
func TestEmptyScratchFoldersAreReusedAndOthersAreNot(t *testing.T) {
	tl := fixture(t, "stdincopy")
	r := tools.Runner{Sandbox: tools.Sandbox{ScratchDir: devtest.SharedDir(t)}}
	base := ""
	call := func() string {
		t.Helper()
		p := r.Prepare(context.Background(), tl, json.RawMessage(`{"n": 1}`))
		defer p.Close()
		if res := p.Run(context.Background()); !res.OK {
			t.Fatalf("got %+v", res)
		}
		base = filepath.Dir(p.ScratchDir())
		return p.ScratchDir()
	}
	folders := func() int {
		t.Helper()
		ents, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}

	first := call()
	if again := call(); again != first {
		t.Errorf("the second call ran in %s, want the first call's empty folder %s", again, first)
	}
	// Something wrote into the kept folder (another call of the same user can reach it).
	if err := os.WriteFile(filepath.Join(first, "planted"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	second := call()
	if second == first {
		t.Fatalf("a kept folder with a file in it was handed out again")
	}
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Errorf("the folder with a planted file is still there (stat: %v)", err)
	}
	// Its mode changed (a tool may chmod its HOME).
	if err := os.Chmod(second, 0o755); err != nil {
		t.Fatal(err)
	}
	if third := call(); third == second {
		t.Errorf("a kept folder whose mode changed to 0755 was handed out again")
	}
	// A call that leaves something behind loses its folder at Close.
	p := r.Prepare(context.Background(), tl, json.RawMessage(`{"n": 1}`))
	if res := p.Run(context.Background()); !res.OK {
		t.Fatalf("got %+v", res)
	}
	if n := folders(); n != 1 {
		t.Fatalf("%d folders during a sequential call, want 1", n)
	}
	ents, _ := os.ReadDir(base)
	littered := filepath.Join(base, ents[0].Name())
	if err := os.WriteFile(filepath.Join(littered, "left-behind"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := os.Stat(littered); !os.IsNotExist(err) {
		t.Errorf("a folder left with a file in it was kept (stat: %v)", err)
	}

	// Three calls held at once leave three folders; sequential calls then reuse them, and the
	// host never keeps more.
	var held []*tools.Prepared
	for i := 0; i < 3; i++ {
		held = append(held, r.Prepare(context.Background(), tl, json.RawMessage(`{"n": 1}`)))
	}
	for _, h := range held {
		h.Close()
	}
	if n := folders(); n != 3 {
		t.Errorf("%d folders kept after three calls at once, want 3", n)
	}
	for i := 0; i < 5; i++ {
		call()
	}
	if n := folders(); n != 3 {
		t.Errorf("%d folders after five more calls, want the same 3", n)
	}
}

// A host killed during a call cannot remove the call's scratch folder: the next host to use
// the same parent folder removes what hosts that no longer run left there, and only that.
func TestScratchFoldersOfHostsThatDiedAreRemoved(t *testing.T) {
	parent := devtest.SharedDir(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(parent, tools.ScratchBaseName(gone.Process.Pid), "skein-tool-x-1")
	kept := filepath.Join(parent, tools.ScratchBaseName(1), "skein-tool-x-2") // pid 1 runs
	// The same pid in another pid namespace (a container sharing the folder) is not ours to judge.
	other := filepath.Join(parent, fmt.Sprintf("skein-tools-1-%d", gone.Process.Pid), "skein-tool-x-3")
	for _, d := range []string{filepath.Join(stale, "ro"), kept, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(stale, "ro", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(filepath.Join(stale, "ro"), 0o500) // a tool may leave folders read-only

	r := tools.Runner{Sandbox: tools.Sandbox{ScratchDir: parent}}
	p := r.Prepare(context.Background(), fixture(t, "stdincopy"), json.RawMessage(`{"n": 1}`))
	scratch := p.ScratchDir()
	res := p.Run(context.Background())
	p.Close()
	if !res.OK {
		t.Fatalf("got %+v", res)
	}
	own := filepath.Join(parent, tools.ScratchBaseName(os.Getpid()))
	if filepath.Dir(scratch) != own {
		t.Errorf("the call ran in %s, want a folder under this host's %s", scratch, own)
	}
	if _, err := os.Stat(filepath.Dir(stale)); !os.IsNotExist(err) {
		t.Errorf("the scratch folders of a host that died are still there (stat: %v)", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the scratch folder of a running host was removed: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("the scratch folder of a host in another pid namespace was removed: %v", err)
	}
	if fi, err := os.Stat(own); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("this host's scratch folder: %v, %v; want mode 0711 (tools pass through, cannot list)", fi, err)
	}
}
