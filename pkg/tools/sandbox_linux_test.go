//go:build linux

package tools_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/harden"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/pkg/tools/uidrange"
)

// The key holder is this test binary started again with a fake provider key and a fake NATS
// nkey seed in its initial environment (what /proc/<pid>/environ shows) and in its memory, like a
// role process that read its key and its credentials. It runs one fixture tool through a Runner
// and prints the result.
const (
	keyholderEnv = "SKEIN_TEST_KEYHOLDER"
	seedEnv      = "SKEIN_TEST_NKEY_SEED"
)

// heldSeed is the key holder's copy of its NATS seed, as a role keeps the credentials it read.
var heldSeed []byte

// fakeKey and newFakeSeed make the secrets the key holder is given. The markers secretgrep.py
// hunts for (FAKEKEY-, SUAFAKESEED) are made upper case at run time and only in the test that
// starts the key holder, so neither this binary's text nor the key holder's own variables hold
// them: what the hunt finds is what was planted.
func fakeKey() string {
	return "sk-ant-api03-" + strings.ToUpper("fakekey-") + strconv.Itoa(os.Getpid())
}

// newFakeSeed is shaped like a NATS user nkey seed (S, U, 56 base32 characters), marked so the
// hunt knows it and random so no other process holds it.
func newFakeSeed() string {
	raw := make([]byte, 30)
	if _, err := rand.Read(raw); err != nil {
		panic(err)
	}
	return "SUA" + strings.ToUpper("fakeseed") + base32.StdEncoding.EncodeToString(raw)[:47]
}

func TestMain(m *testing.M) {
	if tool := os.Getenv(keyholderEnv); tool != "" {
		os.Exit(keyholder(tool))
	}
	os.Exit(m.Run())
}

func keyholder(tool string) int {
	heldSeed = []byte(os.Getenv(seedEnv))
	defer runtime.KeepAlive(heldSeed)
	if os.Getenv("SKEIN_TEST_DUMPABLE") != "1" {
		if err := harden.Process(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	if os.Getenv("SKEIN_TEST_NO_LANDLOCK") == "1" {
		tools.WithoutLandlock()
	}
	ts, err := tools.LoadDir(os.Getenv("SKEIN_TEST_FIXTURES"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r := tools.Runner{Sandbox: tools.Sandbox{RunAs: os.Getenv("SKEIN_TEST_RUN_AS")}}
	for _, tl := range ts {
		if tl.Name == tool {
			if v, err := strconv.ParseFloat(os.Getenv("SKEIN_TEST_TIMEOUT"), 64); err == nil {
				tl.TimeoutS = v
			}
			res := r.Run(context.Background(), tl, json.RawMessage(`{}`))
			_ = json.NewEncoder(os.Stdout).Encode(res)
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "no tool", tool)
	return 2
}

// startKeyholder starts the key holder as uid (-1: ours) running tool.
func startKeyholder(t *testing.T, uid int, tool string, env ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	fixtures, _ := filepath.Abs("testdata/tools")
	cmd := exec.Command("/proc/self/exe") // readable by another uid even in a private build folder
	cmd.Env = append([]string{
		keyholderEnv + "=" + tool,
		"ANTHROPIC_API_KEY=" + fakeKey(),
		seedEnv + "=" + newFakeSeed(),
		"SKEIN_TEST_FIXTURES=" + fixtures,
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/",
	}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start key holder: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("key holder stderr: %s", errb.String())
		}
	})
	return cmd, &out
}

type grepReport struct {
	Found []struct {
		PID   int    `json:"pid"`
		Where string `json:"where"`
		What  string `json:"what"`
	} `json:"found"`
	EnvironsRead int    `json:"environs_read"`
	OwnEnviron   bool   `json:"own_environ"`
	MemError     string `json:"mem_error"`
	MemBytes     int    `json:"mem_bytes"`
	UID          int    `json:"uid"`
}

func secretHunt(t *testing.T, holderUID int, env ...string) (grepReport, int) {
	t.Helper()
	cmd, out := startKeyholder(t, holderUID, "secretgrep", env...)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("key holder: %v", err)
	}
	var res protocol.ToolResult
	var rep grepReport
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || !res.OK || json.Unmarshal(res.Result, &rep) != nil {
		t.Fatalf("secretgrep did not run: %v %+v", err, res)
	}
	if !rep.OwnEnviron {
		t.Fatalf("the tool could not even read its own environ: the hunt proves nothing (%+v)", rep)
	}
	return rep, cmd.Process.Pid
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start the key holder as another user; run as root (as CI does)")
	}
}

func TestToolCannotReadTheKeyOfTheProcessThatStartedIt(t *testing.T) {
	devtestPython(t)
	needRoot(t)
	// The planted seed is one the mesh itself treats as a NATS credential.
	if seed := newFakeSeed(); redact.String(seed) != redact.Mask {
		t.Fatalf("the fake seed %q is not shaped like an nkey seed (redacted: %q)", seed, redact.String(seed))
	}
	t.Run("mesh as root, tools as a uid of their own", func(t *testing.T) {
		rep, _ := secretHunt(t, -1)
		if len(rep.Found) > 0 || !inDefaultUIDs(rep.UID) || rep.MemError == "" {
			t.Errorf("tool as uid %d found a secret at %+v (mem error %q)", rep.UID, rep.Found, rep.MemError)
		}
	})
	t.Run("same uid, key holder non-dumpable", func(t *testing.T) {
		rep, _ := secretHunt(t, 65534, "SKEIN_TEST_RUN_AS=current", "SKEIN_TEST_NO_LANDLOCK=1")
		if len(rep.Found) > 0 || rep.UID != 65534 || rep.MemError == "" {
			t.Errorf("tool found a secret at %+v (mem error %q)", rep.Found, rep.MemError)
		}
	})
	// A tool in a Landlock domain cannot trace, so cannot read the /proc files of, a process
	// outside it, even a dumpable one of its own uid.
	t.Run("same uid, key holder dumpable, Landlock", func(t *testing.T) {
		needLandlock(t)
		rep, _ := secretHunt(t, 65534, "SKEIN_TEST_RUN_AS=current", "SKEIN_TEST_DUMPABLE=1")
		if len(rep.Found) > 0 || rep.UID != 65534 || rep.MemError == "" {
			t.Errorf("tool found a secret at %+v (mem error %q)", rep.Found, rep.MemError)
		}
	})
	// The controls: without the protections the same hunt finds both secrets, so the test can
	// fail.
	t.Run("control: same uid, key holder dumpable, no Landlock", func(t *testing.T) {
		rep, holder := secretHunt(t, 65534, "SKEIN_TEST_RUN_AS=current", "SKEIN_TEST_DUMPABLE=1", "SKEIN_TEST_NO_LANDLOCK=1")
		for _, what := range []string{"provider key", "nats seed"} {
			for _, where := range []string{"environ", "mem"} {
				if !rep.has(holder, what, where) {
					t.Errorf("the unprotected key holder's %s was not found in its %s: %+v (mem error %q, %d bytes read)", what, where, rep.Found, rep.MemError, rep.MemBytes)
				}
			}
		}
	})
	t.Run("control: root defeats non-dumpable", func(t *testing.T) {
		rep, holder := secretHunt(t, -1, "SKEIN_TEST_RUN_AS=current", "SKEIN_TEST_NO_LANDLOCK=1")
		for _, what := range []string{"provider key", "nats seed"} {
			if !rep.has(holder, what, "environ") || !rep.has(holder, what, "mem") {
				t.Errorf("a root tool did not find the %s of a non-dumpable root process in both environ and mem: %+v", what, rep.Found)
			}
		}
	})
}

// inDefaultUIDs reports whether uid is one of tools.DefaultUIDs.
func inDefaultUIDs(uid int) bool {
	first, count, err := uidrange.Parse(tools.DefaultUIDs)
	return err == nil && uid >= first && uid < first+count
}

// needLandlock skips a test where the host gives calls no Landlock domain.
func needLandlock(t *testing.T) {
	t.Helper()
	var r tools.Runner
	if info, err := r.SandboxInfo(); err != nil || !strings.Contains(info, "Landlock") {
		t.Skipf("no Landlock here: %s %v", info, err)
	}
}

// has reports whether the hunt found what (provider key, nats seed) in pid's where (environ, mem).
func (r grepReport) has(pid int, what, where string) bool {
	for _, f := range r.Found {
		if f.PID == pid && f.What == what && f.Where == where {
			return true
		}
	}
	return false
}

// TestToolDiesWithItsHost runs with the default run_as and with run_as current, which covers
// the traced start on a root host that may not set limits on nobody's processes.
func TestToolDiesWithItsHost(t *testing.T) {
	for _, runAs := range []string{"", "current"} {
		t.Run("run_as="+runAs, func(t *testing.T) { testToolDiesWithItsHost(t, runAs) })
	}
}

func testToolDiesWithItsHost(t *testing.T, runAs string) {
	devtestPython(t)
	pidfile := filepath.Join(devtest.SharedDir(t), "tool.pid")
	holder, _ := startKeyholder(t, -1, "sleeper", "SKEIN_TEST_PIDFILE="+pidfile, "SKEIN_TEST_TIMEOUT=600", "SKEIN_TEST_RUN_AS="+runAs)
	child := readPID(t, pidfile) // the sleeper's own background child; its parent is the tool
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	toolPID := parentOf(t, child)
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	assertGone(t, toolPID)
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// Both ways of killing a call's whole tree: the cgroup where this machine lets us make one, and
// the subreaper everywhere.
func treeKillModes(t *testing.T) []string {
	modes := []string{"off"}
	var r tools.Runner
	if info, err := r.SandboxInfo(); err == nil && strings.Contains(info, "cgroup v2") {
		modes = append(modes, "auto")
	} else {
		t.Logf("cgroup v2 mode not tested here: %s %v", info, err)
	}
	return modes
}

func TestSetsidDoubleForkEscapeeIsKilled(t *testing.T) {
	// run_as current: the traced start too, where the default falls back to the trampoline.
	for _, mode := range treeKillModes(t) {
		for _, hang := range []bool{true, false} {
			for _, runAs := range []string{"", "current"} {
				t.Run(fmt.Sprintf("cgroup=%s/hang=%v/run_as=%s", mode, hang, runAs), func(t *testing.T) {
					testEscapee(t, mode, hang, runAs)
				})
			}
		}
	}
}

func testEscapee(t *testing.T, mode string, hang bool, runAs string) {
	pidfile := filepath.Join(devtest.SharedDir(t), "escapee.pid")
	t.Setenv("SKEIN_TEST_PIDFILE", pidfile)
	tl := fixture(t, "escapee")
	if hang {
		t.Setenv("SKEIN_TEST_HANG", "1")
		tl.TimeoutS = 3
	} else {
		t.Setenv("SKEIN_TEST_HANG", "0")
	}
	r := tools.Runner{Sandbox: tools.Sandbox{Cgroup: mode, RunAs: runAs}}
	res := r.Run(context.Background(), tl, json.RawMessage(`{}`))
	if hang {
		wantFail(t, res, protocol.ToolErrTimeout, "timed out")
	} else if !res.OK {
		t.Fatalf("want ok, got %+v", res)
	}
	pid := readPID(t, pidfile)
	if sid, _ := unix.Getsid(pid); sid == unix.Getpgrp() {
		t.Fatalf("the escapee did not leave the session")
	}
	assertGone(t, pid)
}

func TestForkBombIsBoundedByTheProcessLimit(t *testing.T) {
	devtestPython(t)
	if os.Geteuid() == 0 {
		var r tools.Runner
		if info, _ := r.SandboxInfo(); !strings.Contains(info, "uid 65534") && !strings.Contains(info, "pids.max") {
			t.Skipf("root is exempt from RLIMIT_NPROC and tools do not run as another uid here: %s", info)
		}
	}
	var r tools.Runner
	res := r.Run(context.Background(), fixture(t, "forkcount"), json.RawMessage(`{}`))
	var got struct {
		Started int    `json:"started"`
		PIDs    []int  `json:"pids"`
		Error   string `json:"error"`
	}
	if !res.OK || json.Unmarshal(res.Result, &got) != nil {
		t.Fatalf("got %+v", res)
	}
	if got.Started == 0 || got.Started > 20 || got.Error == "" {
		t.Fatalf("a tool limited to 20 processes started %d children (fork error %q), want 1..20 and a refusal", got.Started, got.Error)
	}
	for _, pid := range got.PIDs {
		assertGone(t, pid)
	}
	// The real thing: a recursive fork bomb ends at its timeout with nothing left running.
	before := sandboxProcs(t)
	res = r.Run(context.Background(), fixture(t, "forkbomb"), json.RawMessage(`{}`))
	// It ends at its timeout, or earlier when the limit leaves its own shell unable to fork.
	if res.OK || (res.Kind != protocol.ToolErrTimeout && !strings.Contains(res.Error+res.Stderr, "fork")) {
		t.Fatalf("fork bomb: %+v", res)
	}
	poll.Eventually(t, 10*time.Second, "no sandboxed process left after the fork bomb's call", func() error {
		if left := sandboxProcs(t); left > before {
			return fmt.Errorf("%d left (%d before)", left, before)
		}
		return nil
	})
}

// sandboxProcs counts live (not zombie) processes that carry a tool call's marker.
func sandboxProcs(t *testing.T) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		pid, _ := strconv.Atoi(e.Name())
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, []byte(tools.SandboxEnvVar+"=")) && !isZombie(pid) {
			n++
		}
	}
	return n
}

// TestResourceLimitsApply checks the limits under both starts: the trampoline, and the traced
// start, where the tool sets them on itself at its exec (a host that cannot trace at all says
// so in its sandbox line and the case is skipped).
func TestResourceLimitsApply(t *testing.T) {
	for _, start := range []string{"trampoline", "auto"} {
		t.Run("start="+start, func(t *testing.T) {
			sb := tools.Sandbox{Start: start}
			info, err := (&tools.Runner{Sandbox: sb}).SandboxInfo()
			if err != nil {
				t.Fatal(err)
			}
			if start == "auto" && !strings.Contains(info, "under ptrace") {
				t.Skipf("no traced start on this host: %s", info)
			}
			if start == "trampoline" && !strings.Contains(info, "trampoline") {
				t.Fatalf("sandbox line %q does not name the trampoline", info)
			}
			testResourceLimitsApply(t, sb)
		})
	}
}

// buildTrampoline builds the skein-tool-sandbox program into a folder the tools' users reach.
func buildTrampoline(t *testing.T) string {
	t.Helper()
	out := filepath.Join(devtest.SharedDir(t), "skein-tool-sandbox")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/skein-tool-sandbox")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build skein-tool-sandbox: %v\n%s", err, b)
	}
	return out
}

func TestTheSmallTrampolineSetsTheLimits(t *testing.T) {
	prog := buildTrampoline(t)
	sb := tools.Sandbox{Start: "trampoline", Trampoline: prog}
	info, err := (&tools.Runner{Sandbox: sb}).SandboxInfo()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "trampoline exec, "+prog) {
		t.Fatalf("sandbox line %q does not name %s", info, prog)
	}
	testResourceLimitsApply(t, sb)

	// Without one configured and none next to the host's binary (this test binary), the host
	// binary itself is the trampoline, and the line says how to do better.
	info, err = (&tools.Runner{Sandbox: tools.Sandbox{Start: "trampoline"}}).SandboxInfo()
	if err != nil || !strings.Contains(info, "a copy of this binary (install skein-tool-sandbox next to it") {
		t.Errorf("no trampoline program: line %q, err %v", info, err)
	}
	// A configured one that is not a trampoline is an error at start, not at the first call.
	_, err = (&tools.Runner{Sandbox: tools.Sandbox{Start: "trampoline", Trampoline: "/bin/false"}}).SandboxInfo()
	if err == nil || !strings.Contains(err.Error(), "tools.sandbox.trampoline /bin/false") {
		t.Errorf("tools.sandbox.trampoline /bin/false: err %v", err)
	}
}

func TestAToolThatCannotSetItsOwnLimitsStartsThroughTheTrampoline(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("tools set themselves up at their exec on amd64 only")
	}
	r := &tools.Runner{}
	if info, err := r.SandboxInfo(); err != nil || !strings.Contains(info, "by the tool on itself") {
		t.Fatalf("sandbox line %q, err %v", info, err)
	}
	defer tools.FailSetupInside()()
	if res := r.Run(context.Background(), fixture(t, "plain"), json.RawMessage(`{}`)); !res.OK {
		t.Errorf("plain tool: %+v", res)
	}
	// The limits still hold: the trampoline set them.
	devtestPython(t)
	res := r.Run(context.Background(), fixture(t, "limits"), json.RawMessage(`{}`))
	var got map[string]any
	if !res.OK || json.Unmarshal(res.Result, &got) != nil {
		t.Fatalf("got %+v", res)
	}
	if got["RLIMIT_CPU"] != 7.0 || got["RLIMIT_NOFILE"] != 32.0 || got["alloc_512mb"] != "MemoryError" {
		t.Errorf("limits %v", got)
	}
}

func testResourceLimitsApply(t *testing.T, sb tools.Sandbox) {
	devtestPython(t)
	r := tools.Runner{Sandbox: sb}
	res := r.Run(context.Background(), fixture(t, "limits"), json.RawMessage(`{}`))
	var got map[string]any
	if !res.OK || json.Unmarshal(res.Result, &got) != nil {
		t.Fatalf("got %+v", res)
	}
	want := map[string]any{
		"RLIMIT_CPU": 7.0, "RLIMIT_AS": float64(256 << 20), "RLIMIT_NOFILE": 32.0,
		"alloc_512mb": "MemoryError", "open_100": "Too many open files",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if n, _ := got["RLIMIT_NPROC"].(float64); n < 50 {
		t.Errorf("RLIMIT_NPROC = %v, want the uid's tasks + 50", got["RLIMIT_NPROC"])
	}
	// Config defaults apply where the manifest says nothing.
	sb.Limits = tools.Limits{OpenFiles: 64}
	r2 := tools.Runner{Sandbox: sb}
	tl := fixture(t, "limits")
	tl.Sandbox = nil
	res = r2.Run(context.Background(), tl, json.RawMessage(`{}`))
	if !res.OK || json.Unmarshal(res.Result, &got) != nil {
		t.Fatalf("got %+v", res)
	}
	if got["RLIMIT_NOFILE"] != 64.0 || got["RLIMIT_CPU"] != float64(tools.DefaultLimits.CPUSeconds) {
		t.Errorf("host defaults not applied: %v", got)
	}
	// CPU time: the tool is stopped by SIGXCPU long before its 60 s timeout, and told why.
	wantFail(t, r.Run(context.Background(), fixture(t, "cpuburn"), json.RawMessage(`{}`)), protocol.ToolErrExit, "CPU-time limit")
}

func TestSandboxStartErrorsAreClear(t *testing.T) {
	needRoot(t)
	// A program in a folder only root can enter cannot run as nobody: say so before starting.
	dir := t.TempDir() // 0700, root's
	prog := filepath.Join(dir, "tool.sh")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tl := fixture(t, "plain")
	tl.Argv = []string{prog}
	var r tools.Runner
	wantFail(t, r.Run(context.Background(), tl, json.RawMessage(`{}`)), protocol.ToolErrStart, "cannot be run by uid", "tools.sandbox.run_as")
	bad := tools.Runner{Sandbox: tools.Sandbox{RunAs: "no-such-user-skein"}}
	wantFail(t, bad.Run(context.Background(), fixture(t, "plain"), json.RawMessage(`{}`)), protocol.ToolErrStart, "tools.sandbox.run_as")
}

func devtestPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
}

// BenchmarkRunSandboxed is the cost of one call of a trivial tool (sh printing a JSON value)
// under each start and tree-kill mechanism, as the host's user and as the tools' default user:
// scratch folder, uid, namespaces, cgroup, exec, prologue, kill, clean-up. Besides the mean it
// reports the median call (p50-ns/call) and the CPU time of the host and the tools per call
// (cpu-ns/call), the steadier figures on a busy machine.
func BenchmarkRunSandboxed(b *testing.B) {
	t := &testing.T{}
	tl := fixture(t, "plain")
	for _, start := range []string{"trampoline", "auto"} {
		for _, mode := range []string{"auto", "off"} {
			// run_as current: the tools' user is the host's; auto: the default, tools as
			// other users when the host is root.
			for _, runAs := range []string{"current", "auto"} {
				b.Run("start="+start+"/cgroup="+mode+"/run_as="+runAs, func(b *testing.B) {
					r := tools.Runner{Sandbox: tools.Sandbox{Cgroup: mode, Start: start, RunAs: runAs}}
					info, _ := r.SandboxInfo()
					b.Log(info)
					took := make([]time.Duration, 0, b.N)
					cpu0 := cpuTime()
					for i := 0; i < b.N; i++ {
						begin := time.Now()
						if res := r.Run(context.Background(), tl, json.RawMessage(`{}`)); !res.OK {
							b.Fatalf("%+v", res)
						}
						took = append(took, time.Since(begin))
					}
					cpu := cpuTime() - cpu0
					slices.Sort(took)
					b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns/call")
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/call")
				})
			}
		}
	}
}

// cpuTime is the CPU time, user and system, of this process and its waited-for children.
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}
