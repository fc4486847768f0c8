//go:build linux

package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
)

// hostileReport is what the hostile fixture managed against the victim.
type hostileReport struct {
	Victim  int    `json:"victim"`
	Environ string `json:"environ"`
	Mem     string `json:"mem"`
	Ptrace  string `json:"ptrace"`
	Signal  string `json:"signal"`
}

// attack runs the victim and the hostile tool at the same time on r and returns what the
// hostile one managed. The victim's secret reaches it through its manifest's env.
func attack(t *testing.T, sb tools.Sandbox, allowHostile ...string) hostileReport {
	t.Helper()
	devtestPython(t)
	dir := devtest.SharedDir(t)
	r := &tools.Runner{Sandbox: sb, LookupEnv: func(name string) (string, bool) {
		switch name {
		case "SKEIN_TEST_SECRET":
			return "victim-secret", true
		case "SKEIN_TEST_DIR":
			return dir, true
		}
		return os.LookupEnv(name)
	}}
	info, err := r.SandboxInfo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sandbox: %s", info)
	hostile := fixture(t, "hostile")
	if len(allowHostile) > 0 {
		hostile.Sandbox = &tools.ManifestSandbox{SeccompAllow: allowHostile}
	}
	var wg sync.WaitGroup
	var victim protocol.ToolResult
	wg.Add(1)
	go func() {
		defer wg.Done()
		victim = r.Run(context.Background(), fixture(t, "victim"), json.RawMessage(`{}`))
	}()
	res := r.Run(context.Background(), hostile, json.RawMessage(`{}`))
	wg.Wait()
	if !victim.OK {
		t.Fatalf("victim: %+v", victim)
	}
	var rep hostileReport
	if !res.OK || json.Unmarshal(res.Result, &rep) != nil {
		t.Fatalf("hostile: %+v", res)
	}
	return rep
}

// Two tools running at the same time cannot read each other's environment or memory, trace or
// signal each other: as calls of their own uid (root host), and as calls of one shared uid, which
// Landlock keeps apart. The control shows the same attack succeeds without either.
func TestConcurrentToolsCannotReadTraceOrSignalEachOther(t *testing.T) {
	protected := func(t *testing.T, rep hostileReport, signals bool) {
		t.Helper()
		if !strings.HasPrefix(rep.Environ, "error") || !strings.HasPrefix(rep.Mem, "error") || !strings.HasPrefix(rep.Ptrace, "error") {
			t.Errorf("the hostile tool got at the victim: %+v", rep)
		}
		if signals && !strings.HasPrefix(rep.Signal, "error") {
			t.Errorf("the hostile tool may signal the victim: %+v", rep)
		}
	}
	t.Run("a uid per call", func(t *testing.T) {
		needRoot(t)
		// Without Landlock and with ptrace allowed by seccomp: the uids alone stop it.
		defer tools.WithoutLandlock()()
		rep := attack(t, tools.Sandbox{}, "ptrace")
		protected(t, rep, true)
	})
	t.Run("one uid, Landlock", func(t *testing.T) {
		needLandlock(t)
		sb := tools.Sandbox{RunAs: "current"}
		if os.Geteuid() == 0 {
			sb.RunAs = "nobody"
		}
		// ptrace allowed by seccomp: Landlock alone stops it (and signals from ABI 6 on).
		rep := attack(t, sb, "ptrace")
		info, _ := (&tools.Runner{Sandbox: sb}).SandboxInfo()
		protected(t, rep, !landlockBelow6(info))
	})
	t.Run("one uid, seccomp", func(t *testing.T) {
		sb := tools.Sandbox{RunAs: "current"}
		if os.Geteuid() == 0 {
			sb.RunAs = "nobody"
		}
		defer tools.WithoutLandlock()()
		if rep := attack(t, sb); !strings.HasPrefix(rep.Ptrace, "error") {
			t.Errorf("the seccomp filter let the hostile tool attach to the victim: %+v", rep)
		}
	})
	t.Run("control: one uid, no Landlock, ptrace allowed", func(t *testing.T) {
		sb := tools.Sandbox{RunAs: "current"}
		if os.Geteuid() == 0 {
			sb.RunAs = "nobody"
		}
		defer tools.WithoutLandlock()()
		rep := attack(t, sb, "ptrace")
		// Yama's ptrace_scope 1 and up lets a process trace only its descendants.
		yama, _ := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
		attachable := len(yama) == 0 || yama[0] == '0'
		if rep.Environ != "found" || !strings.HasPrefix(rep.Mem, "read") || (attachable && rep.Ptrace != "attached") || rep.Signal != "allowed" {
			t.Errorf("without a uid of its own, Landlock or seccomp, the hostile tool should get at the victim: %+v", rep)
		}
	})
}

// A host says, one line each, which confinement it cannot give its tools and what that leaves
// open (the toolhost logs them at start).
func TestTheHostNamesWhatItCannotConfine(t *testing.T) {
	defer tools.WithoutLandlock()()
	sb := tools.Sandbox{RunAs: "current", Cgroup: "off"}
	if os.Geteuid() == 0 {
		sb.RunAs = "nobody"
	}
	gaps := (&tools.Runner{Sandbox: sb}).SandboxGaps()
	for _, l := range gaps {
		t.Log(l)
	}
	for _, want := range []string{"calls share one uid", "no Landlock domain per call (turned off for a test): calls of the shared uid can trace", "no process limit per call"} {
		found := false
		for _, l := range gaps {
			found = found || strings.Contains(l, want)
		}
		if !found {
			t.Errorf("no gap line says %q: %q", want, gaps)
		}
	}
	// A uid per call and Landlock: nothing about them to say.
	if os.Geteuid() == 0 {
		tools.WithoutLandlock()() // back on
		for _, l := range (&tools.Runner{}).SandboxGaps() {
			if strings.Contains(l, "uid") || strings.Contains(l, "Landlock") || strings.Contains(l, "process limit") {
				t.Errorf("a root host with a uid per call reports %q", l)
			}
		}
	}
}

// landlockBelow6 reports whether a sandbox line names a Landlock ABI without signal scoping.
func landlockBelow6(info string) bool {
	for abi := 1; abi < 6; abi++ {
		if strings.Contains(info, fmt.Sprintf("Landlock (ABI %d)", abi)) {
			return true
		}
	}
	return false
}

// A fork bomb takes every process its call may have (100) and keeps them; calls running at the
// same time still get their own. The fork bomb's call is ended by its caller and leaves nothing
// behind.
func TestAForkBombLeavesOtherCallsWorking(t *testing.T) {
	var r tools.Runner
	info, err := r.SandboxInfo()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "process limit: pids.max") && !strings.Contains(info, "process limit: RLIMIT_NPROC of the call's own uid") {
		t.Skipf("calls share their process limit here: %s", info)
	}
	dir := devtest.SharedDir(t)
	t.Setenv("SKEIN_TEST_DIR", dir)
	// forkwait starts first, so its limit is set before the bomb takes processes: a limit per
	// uid shared by both calls would leave it none.
	waiting := make(chan protocol.ToolResult, 1)
	go func() { waiting <- r.Run(context.Background(), fixture(t, "forkwait"), json.RawMessage(`{}`)) }()
	before := sandboxProcs(t)
	bomb := fixture(t, "forkhog")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bombed := make(chan protocol.ToolResult, 1)
	go func() { bombed <- r.Run(ctx, bomb, json.RawMessage(`{}`)) }()
	poll.True(t, 30*time.Second, "the fork bomb at its process limit", func() bool { return sandboxProcs(t)-before >= 80 })

	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := <-waiting; !res.OK || string(res.Result) != `"forked 8"` {
		// With a process limit per uid shared by both calls it fails to fork.
		t.Errorf("a call running beside the fork bomb: %+v", res)
	}
	for i := 0; i < 3; i++ {
		if res := r.Run(context.Background(), fixture(t, "plain"), json.RawMessage(`{}`)); !res.OK {
			t.Errorf("a call started during the fork bomb: %+v", res)
		}
	}
	cancel()
	wantFail(t, <-bombed, protocol.ToolErrTimeout, "abandoned")
	poll.True(t, 10*time.Second, "the fork bomb's processes gone", func() bool { return sandboxProcs(t) <= before })
}

// What a call leaves in /tmp, /var/tmp or /dev/shm (or SysV shared memory) is gone for the next
// call, and was never in the host's.
func TestAFileLeftInTmpIsGoneForTheNextCall(t *testing.T) {
	if !privateTmp(t) {
		var r tools.Runner
		info, _ := r.SandboxInfo()
		t.Skipf("calls share the host's /tmp here: %s", info)
	}
	type report struct {
		Found    []string `json:"found"`
		Segments int      `json:"shm_segments"`
		TmpDir   string   `json:"tmpdir"`
	}
	var r tools.Runner
	call := func(tl *tools.Tool) report {
		t.Helper()
		res := r.Run(context.Background(), tl, json.RawMessage(`{}`))
		var rep report
		if !res.OK || json.Unmarshal(res.Result, &rep) != nil {
			t.Fatalf("tmpleaver: %+v", res)
		}
		return rep
	}
	segments := hostSegments(t)
	for i := 0; i < 2; i++ {
		rep := call(fixture(t, "tmpleaver"))
		if len(rep.Found) > 0 || rep.Segments > 0 || rep.TmpDir != "/tmp" {
			t.Errorf("call %d found what an earlier call left: %+v", i+1, rep)
		}
	}
	for _, d := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		if _, err := os.Stat(filepath.Join(d, "skein-left-behind")); err == nil {
			t.Errorf("a call's file reached the host's %s", d)
		}
	}
	if n := hostSegments(t); n != segments {
		t.Errorf("the host has %d SysV shared memory segments after the calls, %d before", n, segments)
	}
	// A manifest may keep the host's folders: then the call's scratch folder is where the host
	// made it, and TMPDIR too.
	tl := fixture(t, "stdincopy")
	tl.Sandbox = &tools.ManifestSandbox{Tmp: "host"}
	p := r.Prepare(context.Background(), tl, json.RawMessage(`{}`))
	res := p.Run(context.Background())
	scratch := p.ScratchDir()
	p.Close()
	var got struct {
		Cwd    string `json:"cwd"`
		TmpDir string `json:"tmpdir"`
	}
	if !res.OK || json.Unmarshal(res.Result, &got) != nil || got.TmpDir != scratch || got.Cwd != scratch {
		t.Errorf("tmp: host: %+v (cwd %q, TMPDIR %q, want %s)", res, got.Cwd, got.TmpDir, scratch)
	}
}

// A tool that lives in /tmp keeps the host's: its calls would not see it in their own. The host
// says so (for its startup log), and the tool runs.
func TestAToolInTmpKeepsTheHostsTmp(t *testing.T) {
	if !privateTmp(t) {
		t.Skip("calls share the host's /tmp here")
	}
	dir, err := os.MkdirTemp("", "skein-tool-in-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	script := filepath.Join(dir, "plain.sh")
	if err := os.WriteFile(script, []byte("echo '[1, 2, 3]'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tl := fixture(t, "plain")
	tl.Argv = []string{"sh", script}
	var r tools.Runner
	if why := r.HostTmpReason(tl); !strings.Contains(why, script) || !strings.Contains(why, "keep the host's") {
		t.Errorf("HostTmpReason: %q, want it to name %s", why, script)
	}
	if res := r.Run(context.Background(), tl, json.RawMessage(`{}`)); !res.OK {
		t.Errorf("a tool in /tmp: %+v", res)
	}
	if why := r.HostTmpReason(fixture(t, "plain")); why != "" {
		t.Errorf("a tool outside /tmp: HostTmpReason %q", why)
	}
}

// A call's mount namespace is kept with its scratch folder for the next call of the same tool
// (making one costs far more than entering one), and only while the calls leave both empty: one
// that leaves a file in /dev/shm gets the next call a new namespace.
func TestAKeptNamespaceIsReusedOnlyWhenLeftEmpty(t *testing.T) {
	if !privateTmp(t) {
		t.Skip("calls share the host's /tmp here")
	}
	var r tools.Runner
	// call runs the tool and says whether it got a new namespace.
	call := func(args string) (made bool) {
		t.Helper()
		before := tools.NamespacesMade()
		res := r.Run(context.Background(), fixture(t, "shmleaver"), json.RawMessage(args))
		var rep struct {
			Found bool `json:"found"`
		}
		if !res.OK || json.Unmarshal(res.Result, &rep) != nil {
			t.Fatalf("shmleaver: %+v", res)
		}
		if rep.Found {
			t.Errorf("a call found the file an earlier call left in /dev/shm")
		}
		return tools.NamespacesMade() > before
	}
	call(`{}`)
	if call(`{}`) {
		t.Errorf("a call after one that left nothing got a new namespace")
	}
	if call(`{"leave": true}`) {
		t.Errorf("the namespace was not kept")
	}
	if !call(`{}`) {
		t.Errorf("a namespace whose /dev/shm a call left a file in was used again")
	}
}

// hostSegments counts the SysV shared memory segments this process sees (-1 without ipcs).
func hostSegments(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("ipcs", "-m").Output()
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "0x") {
			n++
		}
	}
	return n
}

// The seccomp filter denies one call of each group, as a uid of the call's own and as root
// (where the kernel's own checks would let most through); a manifest that allows every group
// gets the same calls through to the kernel, so the test can fail.
func TestSeccompDeniesDangerousCallsUnlessTheManifestAllowsThem(t *testing.T) {
	devtestPython(t)
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the fixture knows the system call numbers of amd64 and arm64")
	}
	var r tools.Runner
	if info, err := r.SandboxInfo(); err != nil || !strings.Contains(info, "seccomp") {
		t.Skipf("no seccomp filter here: %s %v", info, err)
	}
	type report struct {
		Names      map[string]string `json:"names"`
		NoNewPrivs string            `json:"no_new_privs"`
		Seccomp    string            `json:"seccomp"`
	}
	run := func(t *testing.T, runAs string, allow []string) report {
		t.Helper()
		r := tools.Runner{Sandbox: tools.Sandbox{RunAs: runAs}}
		tl := fixture(t, "syscalls")
		if allow != nil {
			tl.Sandbox = &tools.ManifestSandbox{SeccompAllow: allow}
		}
		res := r.Run(context.Background(), tl, json.RawMessage(`{}`))
		var rep report
		if !res.OK || json.Unmarshal(res.Result, &rep) != nil {
			t.Fatalf("syscalls: %+v", res)
		}
		return rep
	}
	root := os.Geteuid() == 0
	for _, runAs := range []string{"auto", "current"} {
		t.Run("run_as="+runAs, func(t *testing.T) {
			asRoot := root && runAs == "current"
			rep := run(t, runAs, nil)
			want := map[string]string{"ptrace": "EPERM", "keyring": "EPERM", "namespaces": "EPERM", "clone_newuser": "EPERM", "clone3": "ENOSYS"}
			if asRoot {
				want["mount"], want["modules"] = "EPERM", "EPERM"
			}
			for call, errno := range want {
				if rep.Names[call] != errno {
					t.Errorf("%s: %s, want %s (%+v)", call, rep.Names[call], errno, rep.Names)
				}
			}
			if rep.NoNewPrivs != "1" || rep.Seccomp != "2" {
				t.Errorf("NoNewPrivs %q, Seccomp %q; want 1 and 2 (filter)", rep.NoNewPrivs, rep.Seccomp)
			}
			// Every group allowed: each call reaches the kernel (user namespaces need the
			// kernel to allow them to unprivileged users).
			rep = run(t, runAs, tools.SeccompGroups)
			want = map[string]string{"ptrace": "0", "keyring": "0", "clone3": "EINVAL"}
			for call, errno := range want {
				if rep.Names[call] != errno {
					t.Errorf("allowed %s: %s, want %s (%+v)", call, rep.Names[call], errno, rep.Names)
				}
			}
			// As root, umount2 and delete_module get past the capability checks to the kernel's
			// own errors (ENOENT; ENOSYS for a kernel without modules).
			if asRoot && (rep.Names["mount"] == "EPERM" || rep.Names["modules"] == "EPERM") {
				t.Errorf("allowed mount and modules, as root: %+v", rep.Names)
			}
			if userNamespaces() && (rep.Names["namespaces"] != "0" || rep.Names["clone_newuser"] != "0") {
				t.Errorf("allowed namespaces: %+v", rep.Names)
			}
			// One group allowed, the others still denied.
			rep = run(t, runAs, []string{"ptrace"})
			if rep.Names["ptrace"] != "0" || rep.Names["keyring"] != "EPERM" {
				t.Errorf("ptrace alone allowed: %+v", rep.Names)
			}
		})
	}
}

// userNamespaces reports whether this kernel lets unprivileged users make user namespaces.
func userNamespaces() bool {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil || strings.TrimSpace(string(b)) == "0" {
		return false
	}
	b, err = os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone")
	return err != nil || strings.TrimSpace(string(b)) != "0"
}

// A manifest naming a group the filter does not know does not load.
func TestAnUnknownSeccompGroupIsRefused(t *testing.T) {
	dir := t.TempDir()
	m := `{"name": "x", "description": "d", "command": ["true"], "input_schema": {"type": "object"},
	       "sandbox": {"seccomp_allow": ["ptrace", "everything"], "tmp": "sometimes"}}`
	if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := tools.LoadDir(dir)
	if err == nil || !strings.Contains(err.Error(), `unknown group "everything"`) || !strings.Contains(err.Error(), "tmp must be private or host") {
		t.Errorf("want the unknown group and the bad tmp named, got %v", err)
	}
}
