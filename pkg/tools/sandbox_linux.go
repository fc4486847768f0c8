//go:build linux

package tools

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skein-mesh/skein/pkg/tools/internal/trampoline"
)

// Where the traced start is not possible (see releaseTraced), a tool starts as a fresh copy of
// this binary (the trampoline, package internal/trampoline): the kernel has already given it the
// tool's uid, process group, cgroup and parent-death signal; the trampoline sets the resource
// limits on itself and execs the tool. Limits set either way hold from the tool's first
// instruction, whereas prlimit on a running child races with the child's first fork.
const trampolineArg0 = trampoline.Arg0

// rlimit is one resource limit of a call, with the kernel's resource number.
type rlimit struct {
	res      int
	cur, max uint64
}

// callRlimits are the four limits of a call. CPU: the soft limit sends SIGXCPU, which names the
// cause; the hard one, a bit later, kills.
func callRlimits(l Limits, nprocBase int) []rlimit {
	nproc := uint64(nprocBase + l.Processes)
	as := uint64(l.AddressSpaceMB) << 20
	return []rlimit{
		{unix.RLIMIT_CPU, uint64(l.CPUSeconds), uint64(l.CPUSeconds) + 2},
		{unix.RLIMIT_AS, as, as},
		{unix.RLIMIT_NOFILE, uint64(l.OpenFiles), uint64(l.OpenFiles)},
		{unix.RLIMIT_NPROC, nproc, nproc},
	}
}

// trampolineSpec encodes limits for the trampoline's command line.
func trampolineSpec(ls []rlimit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%d:%d:%d", l.res, l.cur, l.max)
	}
	return strings.Join(parts, ",")
}

// A tool started "traced" is exec'd directly (no trampoline) with PTRACE_TRACEME: the kernel
// stops it right after the exec, before its first instruction, and tells the host, which sets
// the call's limits on it (prlimit) and detaches. The limits hold from the tool's first
// instruction as with the trampoline, and the start costs one exec instead of two (the
// trampoline's exec is a Go runtime start of the whole host binary). Where ptrace is not
// allowed (seccomp, Yama ptrace_scope 3) the probe at start fails and the trampoline is used.

// releaseTraced sets limits on pid, which is stopped at its exec as the tracee of the calling
// thread, and lets it run. inside: the tracee sets them on itself (setLimitsInside), for hosts
// that may not set them from outside.
func releaseTraced(pid int, limits []rlimit, inside bool) error {
	if err := waitStopped(pid); err != nil {
		return fmt.Errorf("wait for the tool to stop at its exec: %w", err)
	}
	if inside {
		if failInside {
			return &insideError{errors.New("failInside is set")}
		}
		if err := setLimitsInside(pid, limits); err != nil {
			return err
		}
	} else {
		for _, l := range limits {
			if err := unix.Prlimit(pid, l.res, &unix.Rlimit{Cur: l.cur, Max: l.max}, nil); err != nil {
				return fmt.Errorf("set resource limit %d: %w", l.res, err)
			}
		}
	}
	if err := syscall.PtraceDetach(pid); err != nil {
		return fmt.Errorf("release the tool after setting its limits: %w", err)
	}
	return nil
}

// insideError is a tool that could not set its own limits (setLimitsInside): that call starts
// through the trampoline instead.
type insideError struct{ err error }

func (e *insideError) Error() string {
	return "the tool could not set its own limits: " + e.err.Error()
}
func (e *insideError) Unwrap() error { return e.err }

// waitStopped waits for the tracee pid to stop.
func waitStopped(pid int) error {
	_, err := waitStop(pid)
	return err
}

// waitStop waits for the tracee pid to stop and says how (its stop signal).
func waitStop(pid int) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, syscall.WALL, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return ws, err
		}
		break
	}
	if !ws.Stopped() {
		return ws, fmt.Errorf("the tool did not stop (wait status %#x)", uint32(ws))
	}
	return ws, nil
}

// probeTraced reports whether a process of the tools' user can be started traced, given its
// limits and released (nil), by starting the trampoline's probe that way. Setting limits on a
// process of another user needs CAP_SYS_RESOURCE, which containers often drop; there the probe
// tries again with the tool setting them on itself (inside). Where ptrace is not allowed, tools
// start through the trampoline.
func probeTraced(cred *syscall.Credential) (inside bool, err error) {
	probe := func(inside bool) error {
		cmd := exec.Command("/proc/self/exe")
		cmd.Args = []string{trampolineArg0 + "-probe"}
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true, Setpgid: true, Credential: cred}
		lim := callRlimits(DefaultLimits, 0)
		if err := startLocked(cmd, func(pid int) error { return releaseTraced(pid, lim, inside) }); err != nil {
			return err
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		return nil
	}
	if !forceInside {
		err = probe(false)
		if err == nil || !errors.Is(err, syscall.EPERM) || !canSetLimitsInside {
			return false, err
		}
	}
	if ierr := probe(true); ierr != nil {
		if err == nil {
			return false, ierr
		}
		return false, fmt.Errorf("%w; and with the tool setting them itself: %v", err, ierr)
	}
	return true, nil
}

// forceInside makes tools set their own limits even where the host could, and failInside makes
// that fail: tests use them to run those paths on any host.
var forceInside, failInside = false, false

// findTrampoline picks the program calls start through when the host cannot set their limits:
// the one configured (it must work), else skein-tool-sandbox next to the host's binary where it
// works, else a copy of the host binary, which always does but costs a couple of milliseconds
// more per call (a large Go program's start). It says which in words for the startup line.
func findTrampoline(configured string, cred *syscall.Credential) (path, which string, err error) {
	if configured != "" {
		if err := probeTrampoline(configured, cred); err != nil {
			return "", "", fmt.Errorf("tools.sandbox.trampoline %s: %w", configured, err)
		}
		return configured, configured, nil
	}
	self := "a copy of this binary"
	exe, err := os.Executable()
	if err != nil {
		return "/proc/self/exe", self, nil
	}
	near := filepath.Join(filepath.Dir(exe), trampolineArg0)
	if _, err := os.Stat(near); err != nil {
		return "/proc/self/exe", self + " (install " + trampolineArg0 + " next to it for faster starts)", nil
	}
	if err := probeTrampoline(near, cred); err != nil {
		return "/proc/self/exe", fmt.Sprintf("%s (%s next to it does not work: %v)", self, trampolineArg0, err), nil
	}
	return near, near, nil
}

// probeTrampoline starts path as the trampoline's probe, as the tools' user.
func probeTrampoline(path string, cred *syscall.Credential) error {
	cmd := exec.Command(path)
	cmd.Args = []string{trampolineArg0 + "-probe"}
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("probe: %w %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// hostSandbox is what a Runner decided once about confining its tools.
type hostSandbox struct {
	uid, gid int // the tools' ids; -1 when they run as the host's user
	cred     *syscall.Credential
	who      string
	cg       *cgroupBase // nil: the subreaper fallback
	// traced: tools are exec'd directly and get their limits while stopped at the exec (see
	// releaseTraced); else through the trampoline. inside: the tool sets them on itself.
	traced, inside bool
	// trampoline is the program a call starts through when not traced, or when its program
	// could not set its own limits (see insideError).
	trampoline string
	info       string
}

func (r *Runner) hostSandbox() (*hostSandbox, error) {
	r.sbOnce.Do(func() { r.sb, r.sbErr = newHostSandbox(r.Sandbox) })
	return r.sb, r.sbErr
}

func newHostSandbox(s Sandbox) (*hostSandbox, error) {
	hs := &hostSandbox{uid: -1, gid: -1, who: "the host's user"}
	runAs := s.RunAs
	if runAs == "" || runAs == "auto" {
		runAs = "current"
		if os.Geteuid() == 0 {
			runAs = "nobody"
		}
	}
	if runAs != "current" {
		uid, gid, err := lookupUser(runAs)
		if err != nil {
			return nil, fmt.Errorf("tools.sandbox.run_as %q: %w", runAs, err)
		}
		if uid != os.Geteuid() {
			if os.Geteuid() != 0 {
				return nil, fmt.Errorf("tools.sandbox.run_as %q needs the host to run as root (it runs as uid %d); use run_as: current", runAs, os.Geteuid())
			}
			hs.uid, hs.gid = uid, gid
			hs.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
			hs.who = fmt.Sprintf("%s (uid %d)", runAs, uid)
		}
	}
	var why string
	switch s.Cgroup {
	case "", "auto":
		hs.cg, why = sharedCgroupBase()
	case "off":
		why = "tools.sandbox.cgroup is off"
	default:
		return nil, fmt.Errorf("tools.sandbox.cgroup must be auto or off, got %q", s.Cgroup)
	}
	var start string
	switch s.Start {
	case "", "auto":
		if inside, err := probeTraced(hs.cred); err != nil {
			start = fmt.Sprintf("a traced start failed: %v", err)
		} else {
			hs.traced, hs.inside = true, inside
			start = "limits set at exec under ptrace"
			if inside {
				start += ", by the tool on itself (the host may not set another user's limits: no CAP_SYS_RESOURCE)"
			}
		}
	case "trampoline":
		start = "tools.sandbox.start"
	default:
		return nil, fmt.Errorf("tools.sandbox.start must be auto or trampoline, got %q", s.Start)
	}
	// A traced start needs the trampoline too, for a program the tool cannot step when it sets
	// its own limits.
	trampoline, which, err := findTrampoline(s.Trampoline, hs.cred)
	if err != nil {
		return nil, err
	}
	hs.trampoline = trampoline
	if !hs.traced {
		start = fmt.Sprintf("limits set by a trampoline exec, %s (%s)", which, start)
	}
	if hs.cg == nil {
		if err := enableSubreaper(); err != nil {
			return nil, fmt.Errorf("no way to kill a tool's whole process tree: no cgroup v2 (%s) and %w", why, err)
		}
		hs.info = fmt.Sprintf("tools run as %s; process tree killed by child subreaper (%s)", hs.who, why)
	} else {
		hs.info = fmt.Sprintf("tools run as %s; process tree killed by cgroup v2 %s", hs.who, hs.cg.dir)
		if hs.cg.pids {
			hs.info += " (pids.max per call)"
		}
	}
	hs.info += "; " + start
	return hs, nil
}

func lookupUser(name string) (uid, gid int, err error) {
	if n, err := strconv.Atoi(name); err == nil {
		return n, n, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		if name == "nobody" {
			return 65534, 65534, nil
		}
		return 0, 0, err
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, nil
}

// SandboxInfo says in one line how tools are confined, for a host's startup log. An error is the
// reason tools cannot run at all.
func (r *Runner) SandboxInfo() (string, error) {
	hs, err := r.hostSandbox()
	if err != nil {
		return "", err
	}
	return hs.info, nil
}

// confine sets up cmd (the tool) with everything the kernel applies at fork: own process group,
// parent-death signal, uid, cgroup; and its limits: set at the exec stop (traced) or by the
// trampoline, which cmd then starts.
func (r *Runner) confine(cmd *exec.Cmd, t *Tool, viaTrampoline bool) (*callConf, error) {
	hs, err := r.hostSandbox()
	if err != nil {
		return nil, err
	}
	lim := DefaultLimits.over(r.Sandbox.Limits)
	if t.Sandbox != nil {
		lim = lim.over(t.Sandbox.Limits)
	}
	cc := &callConf{hs: hs, id: newCallID()}
	uid := hs.uid
	if uid < 0 {
		uid = os.Getuid()
	}
	// RLIMIT_NPROC counts every task of the uid on the machine, so "processes" is what the call
	// may add to what that user already runs.
	base := 0
	if uid != 0 {
		base = tasksOf(uid)
	}
	limits := callRlimits(lim, base)
	attr := &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: hs.cred,
	}
	if hs.traced && !viaTrampoline {
		attr.Ptrace = true
		cc.limits = limits
	} else {
		cmd.Args = append([]string{trampolineArg0, trampolineSpec(limits), cmd.Path}, cmd.Args...)
		cmd.Path = hs.trampoline
	}
	cmd.Env = setEnv(cmd.Env, SandboxEnvVar, cc.id)
	if hs.cg != nil {
		cc.cg, err = hs.cg.newCall(cc.id, lim.Processes)
		if err != nil {
			return nil, err
		}
		attr.UseCgroupFD = true
		attr.CgroupFD = cc.cg.fd
	}
	cmd.SysProcAttr = attr
	return cc, nil
}

// callConf is one call's confinement.
type callConf struct {
	hs     *hostSandbox
	id     string
	cg     *callCgroup
	root   int
	limits []rlimit // set by the host at the exec stop (traced start); nil with the trampoline
}

// startTool starts cmd as confine set it up.
func (c *callConf) startTool(cmd *exec.Cmd) error {
	if c.limits == nil {
		return startLocked(cmd, nil)
	}
	err := startLocked(cmd, func(pid int) error { return releaseTraced(pid, c.limits, c.hs.inside) })
	if err != nil && c.hs.uid >= 0 && (errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)) {
		err = fmt.Errorf("%w (the tool runs as uid %d: its program, interpreter and their folders must be readable by that user; see tools.sandbox.run_as)", err, c.hs.uid)
	}
	return err
}

var callSeq atomic.Uint64

func newCallID() string {
	return fmt.Sprintf("%d-%d-%d", os.Getpid(), time.Now().UnixNano(), callSeq.Add(1))
}

// started records the tool's pid.
func (c *callConf) started(pid int) {
	c.root = pid
	if c.cg != nil {
		c.cg.closeFD()
		return
	}
	liveRoots.Store(pid, c.id)
}

// killAll kills every process of the call. It runs after the tool's own process has exited and
// been waited for, so that in the subreaper case its orphans have been reparented to us.
func (c *callConf) killAll() {
	if c == nil {
		return
	}
	if c.cg != nil {
		c.cg.kill()
		return
	}
	liveRoots.Delete(c.root)
	sweepOrphans(c.id)
}

// release frees what the call held (its cgroup).
func (c *callConf) release() {
	if c != nil && c.cg != nil {
		c.cg.remove()
	}
}

// startLocked runs cmd.Start on one OS thread that never exits: the parent-death signal fires
// when the thread that forked the child ends, not the process, and Go may end threads. The
// thread is also the tracer of a traced start: traced, when not nil, runs on it right after the
// start; when it fails the process is killed and reaped.
func startLocked(cmd *exec.Cmd, traced func(pid int) error) error {
	forkerOnce.Do(func() {
		forker = make(chan func())
		go func() {
			runtime.LockOSThread()
			for f := range forker {
				f()
			}
		}()
	})
	done := make(chan error, 1)
	forker <- func() {
		err := cmd.Start()
		if err == nil && traced != nil {
			if err = traced(cmd.Process.Pid); err != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		}
		done <- err
	}
	return <-done
}

var (
	forkerOnce sync.Once
	forker     chan func()
)

// ---- cgroup v2 ----

type cgroupBase struct {
	dir  string
	pids bool // the pids controller is enabled for the call cgroups
}

type callCgroup struct {
	dir string
	fd  int
}

var (
	cgOnce sync.Once
	cgBase *cgroupBase
	cgWhy  string
)

// sharedCgroupBase makes (once per process) a cgroup under the one this process runs in, where
// each call gets a child. nil and the reason when cgroup v2 is not there or not writable.
func sharedCgroupBase() (*cgroupBase, string) {
	cgOnce.Do(func() { cgBase, cgWhy = makeCgroupBase() })
	return cgBase, cgWhy
}

func makeCgroupBase() (*cgroupBase, string) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return nil, err.Error()
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, "read /proc/self/cgroup: " + err.Error()
	}
	var rel string
	found := false
	for _, line := range strings.Split(string(self), "\n") {
		if strings.HasPrefix(line, "0::") {
			rel, found = strings.TrimPrefix(line, "0::"), true
		}
	}
	if !found {
		return nil, "this process has no cgroup v2 path"
	}
	parent := filepath.Join(mnt, rel)
	sweepStaleBases(parent)
	dir := filepath.Join(parent, fmt.Sprintf("skein-tools-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Sprintf("cgroup v2 at %s is not writable: %v", parent, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		_ = os.Remove(dir)
		return nil, "kernel has no cgroup.kill (Linux 5.14+)"
	}
	b := &cgroupBase{dir: dir}
	// Best effort: a per-call pids.max where the pids controller is delegated to us.
	if c, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers")); err == nil && bytes.Contains(c, []byte("pids")) {
		b.pids = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0) == nil
	}
	// Probe that a process can be started into a call cgroup (clone3, Linux 5.7+).
	probe, err := b.newCall("probe", 0)
	if err != nil {
		return nil, err.Error()
	}
	defer probe.remove()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{trampolineArg0 + "-probe"}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: probe.fd}
	cmd.Env = []string{}
	if err := cmd.Start(); err != nil {
		probe.closeFD()
		return nil, fmt.Sprintf("cannot start a process into a cgroup (clone3): %v", err)
	}
	probe.closeFD()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return b, ""
}

// sweepStaleBases removes the empty cgroups left by earlier processes that died without cleaning.
func sweepStaleBases(parent string) {
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		pid, ok := strings.CutPrefix(e.Name(), "skein-tools-")
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.Atoi(pid); err == nil && syscall.Kill(n, 0) == syscall.ESRCH {
			calls, _ := os.ReadDir(filepath.Join(parent, e.Name()))
			for _, c := range calls {
				if c.IsDir() {
					_ = os.WriteFile(filepath.Join(parent, e.Name(), c.Name(), "cgroup.kill"), []byte("1"), 0)
					_ = os.Remove(filepath.Join(parent, e.Name(), c.Name()))
				}
			}
			_ = os.Remove(filepath.Join(parent, e.Name()))
		}
	}
}

func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", errors.New("no cgroup v2 mounted")
}

func (b *cgroupBase) newCall(id string, procs int) (*callCgroup, error) {
	dir := filepath.Join(b.dir, "call-"+id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the call's cgroup: %w", err)
	}
	if b.pids && procs > 0 {
		_ = os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(procs+1)), 0)
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open the call's cgroup: %w", err)
	}
	return &callCgroup{dir: dir, fd: fd}, nil
}

func (c *callCgroup) closeFD() {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
}

// kill kills every process in the call's cgroup, however it was started, and waits until the
// cgroup is empty.
func (c *callCgroup) kill() {
	c.closeFD()
	_ = os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ev, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
		if err != nil || bytes.Contains(ev, []byte("populated 0")) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *callCgroup) remove() {
	c.closeFD()
	for i := 0; i < 50; i++ {
		if err := os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- subreaper fallback ----

var (
	subreaperOnce sync.Once
	subreaperErr  error
	// liveRoots maps the pid of every running tool to its call id.
	liveRoots sync.Map
)

// enableSubreaper makes this process the reaper of every orphan below it, so a tool's
// descendants that escaped its process group (setsid, double fork) become our children, where
// sweepOrphans finds them.
func enableSubreaper() error {
	subreaperOnce.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			subreaperErr = fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
		}
	})
	return subreaperErr
}

type procInfo struct {
	pid, ppid, pgid int
	state           byte
}

func readProcs() map[int]procInfo {
	out := map[int]procInfo{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		f := strings.Fields(string(b[i+2:]))
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		out[pid] = procInfo{pid: pid, ppid: ppid, pgid: pgid, state: f[0][0]}
	}
	return out
}

// callIDOf reads the sandbox marker from a process's initial environment ("" if none).
func callIDOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(SandboxEnvVar+"=")); ok {
			return string(v)
		}
	}
	return ""
}

var sweepMu sync.Mutex

// childrenOf lists pid's children from /proc/<pid>/task/*/children (Linux 3.5+ with
// CONFIG_PROC_CHILDREN, as in every distribution kernel); ok is false where that is missing.
func childrenOf(pid int) (kids []int, ok bool) {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, false
	}
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, false
			}
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				kids = append(kids, n)
			}
		}
	}
	return kids, true
}

// procStat reads one process's state and process group ("" state: gone).
func procStat(pid int) (state byte, pgid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 3 {
		return 0, 0
	}
	pgid, _ = strconv.Atoi(f[2])
	return f[0][0], pgid
}

// processTree is how sweepOrphans sees processes: our children, and anyone's children.
type processTree struct {
	children func(pid int) []int
	stat     func(pid int) (state byte, pgid int)
}

// liveTree reads children from /proc/<pid>/task/*/children where the kernel has it (a few
// files per call), else from a scan of every /proc/<pid>/stat.
func liveTree() processTree {
	self := os.Getpid()
	if _, ok := childrenOf(self); ok {
		return processTree{
			children: func(pid int) []int { k, _ := childrenOf(pid); return k },
			stat:     procStat,
		}
	}
	procs := readProcs()
	kids := map[int][]int{}
	for _, p := range procs {
		kids[p.ppid] = append(kids[p.ppid], p.pid)
	}
	return processTree{
		children: func(pid int) []int { return kids[pid] },
		stat: func(pid int) (byte, int) {
			p, ok := procs[pid]
			if !ok {
				return 0, 0
			}
			return p.state, p.pgid
		},
	}
}

// sweepOrphans kills the orphans of call id that were reparented to this process, with all
// their descendants, and reaps them. An orphan belongs to the call when its environment carries
// the call's id, or the id of a call that has ended; orphans of calls still running are left to
// them. Rounds repeat until nothing is left, since a killed parent's children are reparented in
// turn.
func sweepOrphans(id string) {
	sweepMu.Lock()
	defer sweepMu.Unlock()
	self, ourPgid := os.Getpid(), syscall.Getpgrp()
	running := map[string]bool{}
	liveRoots.Range(func(_, v any) bool { running[v.(string)] = true; return true })
	for round := 0; round < 100; round++ {
		tree := liveTree()
		var kill, zombies, orphans []int
		for _, pid := range tree.children(self) {
			state, pgid := tree.stat(pid)
			if state == 0 || pgid == ourPgid {
				continue // gone, or started by other code in this process, not by a tool
			}
			if _, live := liveRoots.Load(pid); live {
				continue
			}
			if state == 'Z' {
				zombies = append(zombies, pid)
				continue
			}
			owner := callIDOf(pid)
			if owner == "" || (owner != id && running[owner]) {
				continue
			}
			// The orphan and everything below it.
			orphans = append(orphans, pid)
			stack := []int{pid}
			for len(stack) > 0 {
				q := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				kill = append(kill, q)
				stack = append(stack, tree.children(q)...)
			}
		}
		for _, pid := range kill {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range zombies {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
		if len(kill) == 0 {
			return
		}
		// Reap the killed orphans (our children; SIGKILL ends them at once); theirs become
		// ours and are found in the next round.
		for _, pid := range orphans {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	}
}

var taskCounts struct {
	sync.Mutex
	at map[int]time.Time
	n  map[int]int
}

// taskCountTTL bounds how stale the task count behind RLIMIT_NPROC may be: counting reads every
// /proc/<pid>/status, tens of milliseconds on a busy machine, too much for every call.
const taskCountTTL = 10 * time.Second

// tasksOf is countTasks, cached for taskCountTTL.
func tasksOf(uid int) int {
	taskCounts.Lock()
	defer taskCounts.Unlock()
	if taskCounts.at == nil {
		taskCounts.at, taskCounts.n = map[int]time.Time{}, map[int]int{}
	}
	if at, ok := taskCounts.at[uid]; ok && time.Since(at) < taskCountTTL {
		return taskCounts.n[uid]
	}
	n := countTasks(uid)
	taskCounts.at[uid], taskCounts.n[uid] = time.Now(), n
	return n
}

// countTasks counts the tasks (threads included, as RLIMIT_NPROC does) of uid.
func countTasks(uid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := strconv.Itoa(uid)
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var isUID bool
		threads := 1
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				f := strings.Fields(v)
				isUID = len(f) > 0 && f[0] == want
			} else if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if isUID {
			n += threads
		}
	}
	return n
}

// accessibleBy reports whether uid/gid may open path (read, and execute when exec) and reach it
// through its folders, by mode bits. It is a check for a clear error before the start, not the
// enforcement, which is the kernel's.
func accessibleBy(path string, uid, gid int, exec bool) bool {
	if uid == 0 {
		return true
	}
	ok := func(st *syscall.Stat_t, bit uint32) bool {
		switch {
		case int(st.Uid) == uid:
			return st.Mode&(bit<<6) != 0
		case int(st.Gid) == gid:
			return st.Mode&(bit<<3) != 0
		}
		return st.Mode&bit != 0
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	var st syscall.Stat_t
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		if syscall.Stat(d, &st) != nil || !ok(&st, 1) {
			return false
		}
		if d == "/" {
			break
		}
	}
	if syscall.Stat(real, &st) != nil {
		return false
	}
	if exec && !ok(&st, 1) {
		return false
	}
	return ok(&st, 4) || (exec && st.Mode&syscall.S_IFMT == syscall.S_IFREG && ok(&st, 1) && !isScript(real))
}

func isScript(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 2)
	n, _ := f.Read(b)
	return n == 2 && string(b) == "#!"
}

// The portable file's copies of the trampoline's constants must agree with it.
const _ = uint(trampolineExit-trampoline.Exit) + uint(trampoline.Exit-trampolineExit)

func init() {
	if trampolinePrefix != trampoline.Prefix {
		panic("tools: trampolinePrefix differs from trampoline.Prefix")
	}
}
