package tools

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/skein-mesh/skein/pkg/tools/limits"
)

// Limits are the resource limits one tool call runs under (pkg/tools/limits, so the
// configuration checks them without the tool runtime).
type Limits = limits.Limits

// DefaultLimits apply where neither config (tools.sandbox) nor manifest (sandbox) sets a limit.
var DefaultLimits = Limits{CPUSeconds: 300, AddressSpaceMB: 8192, OpenFiles: 1024, Processes: 256, ShmMB: 64}

// ManifestSandbox is a manifest's `sandbox` object: limit overrides, where the tool runs and
// what it may do beyond the default.
type ManifestSandbox struct {
	Limits
	// Workdir is "scratch" (default: a fresh folder per call, removed after it) or "tool" (the
	// manifest's folder, for tools that read files beside them by relative path).
	Workdir string `json:"workdir,omitempty"`
	// Home is "scratch" (default: HOME is the call's scratch folder) or "host" (the host's HOME,
	// for tools that need their user's configuration).
	Home string `json:"home,omitempty"`
	// Tmp is "private" (default: the call has its own /tmp, /var/tmp and /dev/shm, where the
	// host can give it them) or "host" (the host's, for a tool that talks to a local service
	// through a socket there).
	Tmp string `json:"tmp,omitempty"`
	// SeccompAllow names groups of system calls (SeccompGroups) the seccomp filter lets this
	// tool make, which it denies every other.
	SeccompAllow []string `json:"seccomp_allow,omitempty"`
}

// SeccompGroups are the groups of system calls a manifest's sandbox.seccomp_allow may name
// (limits.SeccompGroups).
var SeccompGroups = limits.SeccompGroups

func (s *ManifestSandbox) check() []string {
	bad := s.Limits.Check("")
	switch s.Tmp {
	case "", "private", "host":
	default:
		bad = append(bad, fmt.Sprintf("tmp must be private or host, got %q", s.Tmp))
	}
	if _, err := limits.SeccompAllowMask(s.SeccompAllow); err != nil {
		bad = append(bad, err.Error())
	}
	switch s.Workdir {
	case "", "scratch", "tool":
	default:
		bad = append(bad, fmt.Sprintf("workdir must be scratch or tool, got %q", s.Workdir))
	}
	switch s.Home {
	case "", "scratch", "host":
	default:
		bad = append(bad, fmt.Sprintf("home must be scratch or host, got %q", s.Home))
	}
	return bad
}

// Sandbox is how a Runner confines tools. The zero value is the secure default.
type Sandbox struct {
	// Limits are the host's defaults; a manifest's sandbox overrides them field by field.
	Limits Limits
	// RunAs is "auto" or "" (each call runs as a uid of its own from UIDs when the host runs as
	// root, else as the host's user), "current" (always the host's user), or a user name or
	// numeric uid (every call as that one user).
	RunAs string
	// UIDs is the range "first-last" calls take their own uid from ("": DefaultUIDs).
	UIDs string
	// Cgroup is "auto" or "" (a cgroup v2 per call where one can be created, else a child
	// subreaper) or "off" (always the subreaper).
	Cgroup string
	// Start is how a tool gets its limits, no_new_privs, Landlock domain and seccomp filter
	// before its first instruction: "auto" or "" (the tool is exec'd directly under ptrace and
	// sets them on itself while stopped at the exec, then is released; the trampoline where that
	// is not possible) or "trampoline" (always a trampoline that sets them on itself and execs
	// the tool).
	Start string
	// Trampoline is that program ("": the skein-tool-sandbox program next to the host's binary,
	// else a copy of the host binary).
	Trampoline string
	// ScratchDir is where per-call scratch folders are made ("": the system temp folder).
	ScratchDir string
}

// The trampoline (see sandbox_linux.go) reports a failure to start the tool with this exit code
// and a stderr line with this prefix (the values of internal/trampoline, which builds on Linux
// only).
const (
	trampolineExit   = 127
	trampolinePrefix = "skein-sandbox: "
)

// DefaultUIDs is the default tools.sandbox.uids: 65536 uids from 0x70000000, a range systemd
// leaves unused (it gives 524288-1879048191 to containers and uses 61184-65519 for dynamic
// users) and below 2^31, which some programs take for negative.
const DefaultUIDs = "1879048192-1879113727"

// callUser is the user one call runs as.
type callUser struct {
	uid, gid int // -1: the host's user
	pooled   bool
}

// SandboxEnvVar names the variable every tool gets with an id unique to its call: the runner
// finds the call's orphaned processes by it when no cgroup is available.
const SandboxEnvVar = "SKEIN_SANDBOX_ID"

// callDirs makes the call's scratch folder (owned by uid/gid when those differ from ours), or
// takes one kept from an earlier call (spare says where it goes back to) with the mount
// namespace kept with it (nil: none yet), and picks the working directory and HOME.
func (r *Runner) callDirs(t *Tool, uid, gid int) (scratch string, ns *callNS, spare spareKey, dir, home string, err error) {
	parent := r.Sandbox.ScratchDir
	if parent == "" {
		parent = os.TempDir()
	}
	if parent, err = filepath.Abs(parent); err != nil {
		return "", nil, spare, "", "", fmt.Errorf("scratch folder (tools.sandbox.scratch_dir): %w", err)
	}
	base, err := scratchBase(parent)
	if err != nil {
		return "", nil, spare, "", "", fmt.Errorf("scratch folder (tools.sandbox.scratch_dir): %w", err)
	}
	spare = spareKey{base, t.Name, uid}
	if scratch, ns = spares.take(spare); scratch == "" {
		scratch, err = os.MkdirTemp(base, "skein-tool-"+t.Name+"-")
		if err != nil {
			spares.done(spare)
			return "", nil, spare, "", "", fmt.Errorf("scratch folder (tools.sandbox.scratch_dir): %w", err)
		}
		if uid >= 0 && uid != os.Getuid() {
			if err := os.Chown(scratch, uid, gid); err != nil {
				spares.done(spare)
				_ = os.RemoveAll(scratch)
				return "", nil, spare, "", "", fmt.Errorf("scratch folder for uid %d: %w", uid, err)
			}
		}
	}
	dir, home = scratch, scratch
	if s := t.Sandbox; s != nil {
		if s.Workdir == "tool" {
			dir = t.Dir
		}
		if s.Home == "host" {
			home = ""
		}
	}
	return scratch, ns, spare, dir, home, nil
}

// spares keeps the scratch folders of finished calls that their tool left empty, for the next
// call of the same tool as the same user, with the mount namespace that has the folder as its
// /tmp (where calls get their own): on a disk file system making and removing a folder is the
// costly part of it (ext4 here: 25 µs to make and chown, 80 µs to remove, against 2 to 5 µs
// each on tmpfs), and making a mount namespace and tearing it down costs about 0.25 ms;
// most calls leave both empty. A folder goes back only once its call's processes are gone and it
// and its namespace's /dev/shm are empty; it is handed out again only if it is still empty,
// still 0700 and still the user's. For each tool the pool holds no more folders than that tool's
// calls held at once, so a host keeps at most its tool count times its concurrency.
var spares sparePool

type spareKey struct {
	base, tool string
	uid        int // -1: tools run as this process's user
}

type sparePool struct {
	mu sync.Mutex
	m  map[spareKey]*spareList
}

type spareList struct {
	dirs  []spare
	inUse int // folders held by calls now
	peak  int // most folders held by calls at once
}

type spare struct {
	dir string
	ns  *callNS
}

// take returns a kept folder for k and its namespace, or "" when the caller must make one;
// either way the caller now holds a folder, and gives it back with put (or done, if it made
// none).
func (p *sparePool) take(k spareKey) (string, *callNS) {
	p.mu.Lock()
	if p.m == nil {
		p.m = map[spareKey]*spareList{}
	}
	l := p.m[k]
	if l == nil {
		l = &spareList{}
		p.m[k] = l
	}
	l.inUse++
	l.peak = max(l.peak, l.inUse)
	if len(l.dirs) == 0 {
		p.mu.Unlock()
		return "", nil
	}
	sp := l.dirs[len(l.dirs)-1]
	l.dirs = l.dirs[:len(l.dirs)-1]
	p.mu.Unlock()
	if reusable(sp.dir, k.uid) {
		return sp.dir, sp.ns
	}
	sp.ns.release()
	removeScratch(sp.dir)
	return "", nil
}

// done says a caller of take holds no folder after all.
func (p *sparePool) done(k spareKey) {
	p.mu.Lock()
	p.m[k].inUse--
	p.mu.Unlock()
}

// put gives back the folder of a finished call and its namespace: kept when the tool left both
// empty, the pool has room and keep is set (nothing of the call may outlive it), removed
// otherwise.
func (p *sparePool) put(k spareKey, dir string, ns *callNS, keep bool) {
	keep = keep && isEmptyDir(dir) && ns.empty()
	p.mu.Lock()
	l := p.m[k]
	l.inUse--
	keep = keep && len(l.dirs) < l.peak
	if keep {
		l.dirs = append(l.dirs, spare{dir, ns})
	}
	p.mu.Unlock()
	if !keep {
		ns.release()
		removeScratch(dir)
	}
}

// reusable reports whether dir can be a new call's scratch folder: still an empty folder of
// mode 0700 owned by uid (a tool may have changed its folder's mode, and other calls of the same
// user could reach it).
func reusable(dir string, uid int) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return false
	}
	if uid < 0 {
		uid = os.Getuid()
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid && isEmptyDir(dir)
}

func isEmptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return err == io.EOF
}

// scratchPrefix names the folder, under the scratch folder's parent, that holds the scratch
// folders of one host process: skein-tools-<pid namespace>-<pid>. A pid means a process only in
// its namespace, and containers may share a folder.
const scratchPrefix = "skein-tools-"

// scratchNamespace is the start of the names of the folders of host processes in this pid
// namespace: skein-tools-<pid namespace>-.
func scratchNamespace() string {
	ns := "0"
	if l, err := os.Readlink("/proc/self/ns/pid"); err == nil {
		ns = strings.Trim(strings.TrimPrefix(l, "pid:"), "[]")
	}
	return scratchPrefix + ns + "-"
}

// scratchBaseName is the name of the folder of the host process pid in this pid namespace.
func scratchBaseName(pid int) string { return scratchNamespace() + strconv.Itoa(pid) }

var scratchBases sync.Map // parent -> *scratchBaseOnce

type scratchBaseOnce struct {
	once sync.Once
	dir  string
	err  error
}

// scratchBase returns this process's folder for scratch folders under parent, made on first
// use, when the folders that hosts which have died left there (a host killed during a call
// cannot remove its scratch folder) are removed. Mode 0711: a tool reaches its own scratch
// folder but cannot list the others.
func scratchBase(parent string) (string, error) {
	v, _ := scratchBases.LoadOrStore(parent, &scratchBaseOnce{})
	b := v.(*scratchBaseOnce)
	b.once.Do(func() {
		sweepScratch(parent)
		b.dir = filepath.Join(parent, scratchBaseName(os.Getpid()))
		if err := os.Mkdir(b.dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			b.err = err
			return
		}
		// Mkdir applies the umask; the tools' user must be able to pass through.
		b.err = os.Chmod(b.dir, 0o711)
	})
	return b.dir, b.err
}

// sweepScratch removes the scratch folders of host processes that no longer run.
func sweepScratch(parent string) {
	prefix := scratchNamespace()
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		pid, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.Atoi(pid); err == nil && n > 0 && syscall.Kill(n, 0) == syscall.ESRCH {
			removeScratch(filepath.Join(parent, e.Name()))
		}
	}
}

// setEnv replaces or adds name=value in env.
func setEnv(env []string, name, value string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			env[i] = name + "=" + value
			return env
		}
	}
	return append(env, name+"="+value)
}

// removeScratch deletes a call's scratch folder even if the tool made parts of it read-only.
func removeScratch(dir string) {
	if dir == "" {
		return
	}
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}
