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
// this binary or the small skein-tool-sandbox program (the trampoline, package
// internal/trampoline): the kernel has already given it the tool's uid, process group, cgroup,
// namespaces and parent-death signal; the trampoline runs the prologue on itself and execs the
// tool. Set either way, everything holds from the tool's first instruction, whereas prlimit on a
// running child races with the child's first fork, and no_new_privs, a Landlock domain and a
// seccomp filter can only be taken on by a process itself.
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

// A tool started "traced" is exec'd directly (no trampoline) with PTRACE_TRACEME: the kernel
// stops it right after the exec, before its first instruction, and tells the host, which has it
// run its prologue on itself (setupInside) and detaches. The start costs one exec instead of two
// (the trampoline's exec is a Go runtime's start). The seccomp filter, which denies ptrace, is
// the prologue's last call: it binds the tool, not its tracer, and the host's tracing began
// before it (PTRACE_TRACEME, in the child before the exec). Where ptrace is not allowed (a
// seccomp filter on the host, Yama ptrace_scope 3) or on other architectures than amd64, the
// probe at start fails and the trampoline is used.

// releaseTraced runs the prologue in pid, which is stopped at its exec as the tracee of the
// calling thread, and lets it run.
func releaseTraced(pid int, p prologue) error {
	if err := waitStopped(pid); err != nil {
		return fmt.Errorf("wait for the tool to stop at its exec: %w", err)
	}
	if failInside {
		return &insideError{errors.New("failInside is set")}
	}
	if err := setupInside(pid, p.selfCalls()); err != nil {
		return err
	}
	if err := syscall.PtraceDetach(pid); err != nil {
		return fmt.Errorf("release the tool after its prologue: %w", err)
	}
	return nil
}

// insideError is a tool that could not run its own prologue (setupInside): that call starts
// through the trampoline instead.
type insideError struct{ err error }

func (e *insideError) Error() string {
	return "the tool could not set itself up at its exec: " + e.err.Error()
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

// probeTraced reports whether a process of the tools' user can be started traced, run the
// prologue and be released (nil), by starting the trampoline's probe that way.
func probeTraced(cred *syscall.Credential, p prologue, extra []*os.File) error {
	if !canSetupInside {
		return fmt.Errorf("a tool sets itself up at its exec on amd64 only, not %s", runtime.GOARCH)
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{trampolineArg0 + "-probe"}
	cmd.Env = []string{}
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true, Setpgid: true, Credential: cred}
	if err := startLocked(cmd, func(pid int) error { return releaseTraced(pid, p) }); err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	return nil
}

// noLandlock makes new hosts do without Landlock, as on a kernel without it: tests use it to
// show what Landlock stops.
var noLandlock = false

// failInside makes every tool's attempt to set itself up at its exec fail after the probe, as
// for a program the host cannot step: tests use it to run that path on any host.
var failInside = false

// findTrampoline picks the program calls start through when they are not started traced: the
// one configured (it must work), else skein-tool-sandbox next to the host's binary where it
// works, else a copy of the host binary, which always does but costs a couple of milliseconds
// more per call (a large Go program's start). It says which in words for the startup line. A
// program in a folder calls see replaced by their own (privateTmp) cannot serve.
func findTrampoline(configured string, cred *syscall.Credential, p prologue, extra []*os.File, privateTmp bool) (path, which string, err error) {
	if configured != "" {
		if err := probeTrampoline(configured, cred, p, extra, privateTmp); err != nil {
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
	if err := probeTrampoline(near, cred, p, extra, privateTmp); err != nil {
		return "/proc/self/exe", fmt.Sprintf("%s (%s next to it does not work: %v)", self, trampolineArg0, err), nil
	}
	return near, near, nil
}

// probeTrampoline starts path as the tools' user with the prologue of a call, to exec the
// trampoline's probe.
func probeTrampoline(path string, cred *syscall.Credential, p prologue, extra []*os.File, privateTmp bool) error {
	if hidden, ok := hiddenByPrivateTmp(path); ok && privateTmp {
		return fmt.Errorf("%s is in a folder each call gets its own of (%s), so calls cannot see it", hidden, strings.Join(privateDirs, ", "))
	}
	cmd := exec.Command(path)
	cmd.Args = []string{trampolineArg0, p.spec(), "/proc/self/exe", trampolineArg0 + "-probe"}
	cmd.Env = []string{}
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("probe: %w %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// hostSandbox is what a Runner decided once about confining its tools.
type hostSandbox struct {
	// uid and gid: the one user every call runs as, -1 for the host's own; with pool, each call
	// takes a uid of its own from it instead.
	uid, gid int
	cred     *syscall.Credential
	pool     *uidPool
	who      string
	cg       *cgroupBase // nil: the subreaper fallback
	// traced: tools are exec'd directly and run their prologue while stopped at the exec (see
	// releaseTraced); else they start through the trampoline.
	traced bool
	// trampoline is the program a call starts through when not traced, or when its program
	// could not run its prologue (see insideError).
	trampoline string
	landlock   *landlockRuleset // nil: no Landlock domain per call
	seccomp    bool             // calls get the seccomp filter
	privateTmp bool             // calls get their own /tmp, /var/tmp, /dev/shm and IPC namespace
	info       string
	// gaps are the mechanisms this host lacks, each with what that leaves open.
	gaps []string
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
			runAs = ""
		}
	}
	switch runAs {
	case "":
		pool, err := newUIDPool(s.UIDs)
		if err != nil {
			return nil, fmt.Errorf("tools.sandbox.uids: %w", err)
		}
		hs.pool = pool
		hs.who = fmt.Sprintf("a uid of their own per call (of %d-%d)", pool.first, pool.first+pool.count-1)
	case "current":
	default:
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
	shared := hs.pool == nil // every call runs as the same uid
	var why string
	switch s.Cgroup {
	case "", "auto":
		hs.cg, why = sharedCgroupBase()
	case "off":
		why = "tools.sandbox.cgroup is off"
	default:
		return nil, fmt.Errorf("tools.sandbox.cgroup must be auto or off, got %q", s.Cgroup)
	}
	gap := func(format string, a ...any) { hs.gaps = append(hs.gaps, fmt.Sprintf(format, a...)) }
	if shared {
		gap("calls share one uid (%s; a uid per call needs a root host and tools.sandbox.run_as: auto): they may read each other's files, and without Landlock trace and signal each other", hs.who)
	}

	if err := seccompSupported(); err != nil {
		gap("no seccomp filter (%v): tools may make the ptrace, mount, module, keyring and namespace system calls their uid is allowed", err)
	} else if !canSetupInside && !trampoline.HasSeccomp {
		gap("no seccomp filter (the trampoline does not know seccomp's system call number on %s): tools may make the ptrace, mount, module, keyring and namespace system calls their uid is allowed", runtime.GOARCH)
	} else if _, err := filterFor(0); err != nil {
		return nil, err
	} else {
		hs.seccomp = true
	}
	ll, err := newLandlockRuleset()
	if noLandlock {
		ll, err = nil, errors.New("turned off for a test")
	}
	if err != nil {
		if shared {
			gap("no Landlock domain per call (%v): calls of the shared uid can trace, read the /proc files of and signal each other", err)
		}
	} else {
		hs.landlock = ll
		if shared && !ll.signals() {
			gap("Landlock ABI %d does not scope signals (ABI 6, Linux 6.12): calls of the shared uid can signal each other", ll.abi)
		}
	}
	if err := probeMountNS(); err != nil {
		gap("no private /tmp, /var/tmp and /dev/shm per call (%v; a mount namespace needs CAP_SYS_ADMIN): files a call leaves there stay, and other calls may see them (TMPDIR still points at each call's own folder)", err)
	} else {
		hs.privateTmp = true
	}
	pids := "process limit: RLIMIT_NPROC of the call's own uid"
	switch {
	case hs.cg != nil && hs.cg.pids:
		pids = "process limit: pids.max of the call's cgroup"
	case shared:
		reason := why
		if hs.cg != nil {
			reason = "the cgroup's pids controller is not delegated to " + hs.cg.dir
		}
		gap("no process limit per call (%s): RLIMIT_NPROC counts every process of the shared uid, so a call that forks many leaves the others fewer", reason)
		pids = "process limit: RLIMIT_NPROC over what the uid runs"
	}

	// The probes run as a tool would, with a call's prologue.
	cred := hs.cred
	if hs.pool != nil {
		uid, err := hs.pool.take()
		if err != nil {
			return nil, fmt.Errorf("tools.sandbox.uids: %w", err)
		}
		defer hs.pool.put(uid)
		cred = poolCred(uid)
	}
	p, err := hs.prologue(callRlimits(DefaultLimits, 0), 0)
	if err != nil {
		return nil, err
	}
	var start, which string
	switch s.Start {
	case "", "auto":
		if err := probeTraced(cred, p, hs.extraFiles()); err != nil {
			start = fmt.Sprintf("a traced start failed: %v", err)
		} else {
			hs.traced = true
			start = "set up by the tool on itself at its exec, under ptrace"
		}
	case "trampoline":
		start = "tools.sandbox.start"
	default:
		return nil, fmt.Errorf("tools.sandbox.start must be auto or trampoline, got %q", s.Start)
	}
	// A traced start needs the trampoline too, for a program that cannot run its prologue at
	// its exec (a 32-bit one).
	hs.trampoline, which, err = findTrampoline(s.Trampoline, cred, p, hs.extraFiles(), hs.privateTmp)
	if err != nil {
		return nil, err
	}
	if !hs.traced {
		start = fmt.Sprintf("set up by a trampoline exec, %s (%s)", which, start)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tools run as %s; ", hs.who)
	if hs.cg == nil {
		if err := enableSubreaper(); err != nil {
			return nil, fmt.Errorf("no way to kill a tool's whole process tree: no cgroup v2 (%s) and %w", why, err)
		}
		fmt.Fprintf(&b, "process tree killed by child subreaper (%s)", why)
	} else {
		fmt.Fprintf(&b, "process tree killed by cgroup v2 %s", hs.cg.dir)
	}
	fmt.Fprintf(&b, "; %s; limits, no_new_privs", pids)
	if hs.landlock != nil {
		fmt.Fprintf(&b, ", Landlock (ABI %d)", hs.landlock.abi)
	}
	if hs.seccomp {
		b.WriteString(", seccomp")
	}
	fmt.Fprintf(&b, " %s", start)
	if hs.privateTmp {
		b.WriteString("; own /tmp, /var/tmp, /dev/shm and IPC namespace per call")
	}
	hs.info = b.String()
	return hs, nil
}

// prologue is a call's prologue with these limits and seccomp groups allowed.
func (hs *hostSandbox) prologue(limits []rlimit, allow uint32) (prologue, error) {
	p := prologue{limits: limits, landlock: -1}
	if hs.landlock != nil {
		p.landlock = landlockFD
	}
	if hs.seccomp {
		f, err := filterFor(allow)
		if err != nil {
			return p, err
		}
		p.filter = f
	}
	return p, nil
}

// extraFiles are the files a tool's process starts with after stdin, stdout and stderr, for its
// prologue (the first is landlockFD).
func (hs *hostSandbox) extraFiles() []*os.File {
	if hs.landlock == nil {
		return nil
	}
	return []*os.File{hs.landlock.file}
}

func poolCred(uid int) *syscall.Credential {
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
}

// takeUser is the user a call runs as: a uid of its own from the pool, or the host's one.
func (hs *hostSandbox) takeUser() (callUser, error) {
	if hs.pool == nil {
		return callUser{uid: hs.uid, gid: hs.gid}, nil
	}
	uid, err := hs.pool.take()
	if err != nil {
		return callUser{}, fmt.Errorf("no uid for the call: %w", err)
	}
	return callUser{uid: uid, gid: uid, pooled: true}, nil
}

// putUser gives back a call's uid once its processes are gone (clean), or keeps it from every
// later call when some may be left (a cgroup that did not empty): the pool has plenty.
func (hs *hostSandbox) putUser(u callUser, clean bool) {
	if u.pooled && clean {
		hs.pool.put(u.uid)
	}
}

// checkUser is the user whose access to a tool's files decides whether it can start: a pool's
// uids own no file, so its first stands for all of them.
func (hs *hostSandbox) checkUser() (uid, gid int) {
	if hs.pool != nil {
		return hs.pool.first, hs.pool.first
	}
	return hs.uid, hs.gid
}

// callTmp says whether a call of t, whose program is program, gets its own /tmp: not where the
// host cannot give it, the manifest says tmp: host, or the tool lives in a folder the call would
// see replaced (see HostTmpReason).
func (hs *hostSandbox) callTmp(t *Tool, program string) bool {
	if !hs.privateTmp || (t.Sandbox != nil && t.Sandbox.Tmp == "host") {
		return false
	}
	_, hidden := livesInPrivateDirs(t, program)
	return !hidden
}

// livesInPrivateDirs reports the program, script or manifest folder of t that lies in a folder
// a call with its own /tmp sees replaced.
func livesInPrivateDirs(t *Tool, program string) (string, bool) {
	paths := append([]string{program, t.Dir}, t.Argv...)
	for _, p := range paths {
		if filepath.IsAbs(p) {
			if p, hidden := hiddenByPrivateTmp(p); hidden {
				return p, true
			}
		}
	}
	return "", false
}

// HostTmpReason says why calls of t keep the host's /tmp, /var/tmp and /dev/shm where this host
// gives calls their own ("": they get their own, or the host gives none): its program, a script
// or its manifest's folder lies in one of them, where the call would not see it. A host logs it
// at start.
func (r *Runner) HostTmpReason(t *Tool) string {
	hs, err := r.hostSandbox()
	if err != nil || !hs.privateTmp || (t.Sandbox != nil && t.Sandbox.Tmp == "host") {
		return ""
	}
	if p, hidden := livesInPrivateDirs(t, t.Argv[0]); hidden {
		return fmt.Sprintf("%s is in %s, which each call gets its own of: calls of this tool keep the host's (move it elsewhere to give them their own)", p, strings.Join(privateDirs, ", "))
	}
	return ""
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

// SandboxGaps are the confinements this host cannot give its tools, one line each with what
// that leaves open, for a host to log at start.
func (r *Runner) SandboxGaps() []string {
	hs, err := r.hostSandbox()
	if err != nil {
		return nil
	}
	return hs.gaps
}

// confine sets up cmd (the tool of call c) with everything the kernel applies at fork: own
// process group, parent-death signal, uid, cgroup, IPC namespace; and its prologue: run at the
// exec stop (traced) or by the trampoline, which cmd then starts.
func (r *Runner) confine(cmd *exec.Cmd, c *Prepared, viaTrampoline bool) (*callConf, error) {
	hs, err := r.hostSandbox()
	if err != nil {
		return nil, err
	}
	t := c.t
	lim := DefaultLimits.Over(r.Sandbox.Limits)
	if t.Sandbox != nil {
		lim = lim.Over(t.Sandbox.Limits)
	}
	cc := &callConf{hs: hs, id: newCallID(), poolUID: -1}
	uid := c.user.uid
	if uid < 0 {
		uid = os.Getuid()
	}
	// RLIMIT_NPROC counts every task of the uid on the machine, so "processes" is what the call
	// may add to what that user already runs: nothing, for a uid of the call's own.
	base := 0
	if c.user.pooled {
		cc.poolUID = uid
	} else if uid != 0 {
		base = tasksOf(uid)
	}
	p, err := hs.prologue(callRlimits(lim, base), c.allow)
	if err != nil {
		return nil, err
	}
	attr := &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	switch {
	case c.user.pooled:
		attr.Credential = poolCred(uid)
	case c.user.uid >= 0:
		attr.Credential = hs.cred
	}
	if c.privateTmp {
		attr.Cloneflags = syscall.CLONE_NEWIPC
		if c.ns == nil {
			c.ns = newCallNS(c.scratch, lim.ShmMB)
		}
		cc.ns = c.ns
	}
	cmd.ExtraFiles = hs.extraFiles()
	if hs.traced && !viaTrampoline {
		attr.Ptrace = true
		cc.prologue = &p
	} else {
		cmd.Args = append([]string{trampolineArg0, p.spec(), cmd.Path}, cmd.Args...)
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
	hs       *hostSandbox
	id       string
	cg       *callCgroup
	ns       *callNS // the call's (owned by its Prepared); nil: it shares the host's
	root     int
	poolUID  int       // the call's own uid, or -1
	prologue *prologue // run at the exec stop (traced start); nil with the trampoline
	// lingering: some of the call's processes may outlive it (its cgroup did not empty).
	lingering bool
}

// startTool starts cmd as confine set it up.
func (c *callConf) startTool(cmd *exec.Cmd) error {
	if c.prologue == nil {
		return startIn(cmd, c.ns, nil)
	}
	p := *c.prologue
	err := startIn(cmd, c.ns, func(pid int) error { return releaseTraced(pid, p) })
	if err != nil && cmd.SysProcAttr.Credential != nil && (errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)) {
		err = fmt.Errorf("%w (the tool runs as uid %d: its program, interpreter and their folders must be readable by that user; see tools.sandbox.run_as)", err, cmd.SysProcAttr.Credential.Uid)
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
		c.lingering = !c.cg.kill()
		return
	}
	liveRoots.Delete(c.root)
	sweepOrphans(c.id, c.poolUID)
}

// release frees what the call held (its cgroup).
func (c *callConf) release() {
	if c != nil && c.cg != nil {
		c.cg.remove()
	}
}

// onForker runs f on the one OS thread that starts tools, which never exits: the parent-death
// signal fires when the thread that forked the child ends, not the process, and Go may end
// threads. The thread is also the tracer of traced starts, and the one that moves into a call's
// mount namespace to start its tool there (it has a file system context of its own for that).
func onForker(f func()) {
	forkerOnce.Do(func() {
		forker = make(chan func())
		ready := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			// A file system context of its own, so that it may enter mount namespaces.
			_ = unix.Unshare(unix.CLONE_FS)
			// The way back from calls' mount namespaces (see callNS); without it no call gets
			// one (probeMountNS fails).
			if fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				hostMountNS = fd
			}
			close(ready)
			for f := range forker {
				f()
			}
		}()
		<-ready
	})
	done := make(chan struct{})
	forker <- func() { f(); close(done) }
	<-done
}

var (
	forkerOnce sync.Once
	forker     chan func()
	// forkerLost is set when the forker thread could not return to the host's mount namespace:
	// no tool may start from it then.
	forkerLost error
)

// startLocked runs cmd.Start on the forker thread; traced, when not nil, runs on it right after
// the start; when it fails the process is killed and reaped.
func startLocked(cmd *exec.Cmd, traced func(pid int) error) error {
	return startIn(cmd, nil, traced)
}

// startIn is startLocked with the tool started in its own mount namespace ns (nil: the host's).
func startIn(cmd *exec.Cmd, ns *callNS, traced func(pid int) error) error {
	var err error
	onForker(func() {
		if err = forkerLost; err != nil {
			return
		}
		entered := false
		if ns != nil {
			entered, err = ns.enter()
		}
		if err == nil {
			err = cmd.Start()
		}
		if entered {
			if lerr := leaveCallNS(); lerr != nil {
				forkerLost = fmt.Errorf("tools cannot start any more: %w", lerr)
				if err == nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
				err = forkerLost
				return
			}
		}
		if err == nil && traced != nil {
			if err = traced(cmd.Process.Pid); err != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		}
	})
	return err
}

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
// cgroup is empty; false if it did not empty within 5 s.
func (c *callCgroup) kill() bool {
	c.closeFD()
	_ = os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ev, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
		if err != nil || bytes.Contains(ev, []byte("populated 0")) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
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

// uidOf reads a process's real uid (-1 if gone).
func uidOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return -1
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
// their descendants, and reaps them. An orphan belongs to the call when it runs as the call's own
// uid (uid, -1 when calls share one), or when its environment carries the call's id, or the id
// of a call that has ended; orphans of calls still running are left to them. A process can
// clear its environment, not change its uid. Rounds repeat until nothing is left, since a killed
// parent's children are reparented in turn.
func sweepOrphans(id string, uid int) {
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
			if uid < 0 || uidOf(pid) != uid {
				owner := callIDOf(pid)
				if owner == "" || (owner != id && running[owner]) {
					continue
				}
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
