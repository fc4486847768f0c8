//go:build linux

// Package trampoline is the first code a tool's process runs: a fresh copy of the host binary,
// started with argv[0] = Arg0, sets the call's resource limits on itself and execs the tool.
//
// It imports only syscall and unsafe, so Go initializes it before almost any other package of
// the binary (packages initialize in import-path order once their imports are ready): the heavy
// initialization of a full skein binary (model SDKs, gRPC, tokenizers) never runs in a
// trampoline, which costs about as much as starting a small Go program.
package trampoline

import (
	"syscall"
	"unsafe"
)

const (
	// Arg0 marks a trampoline start; Arg0+"-probe" exits 0 at once (used to test cgroup starts).
	Arg0 = "skein-tool-sandbox"
	// Exit is the status of a trampoline that could not start the tool; its stderr line begins
	// with Prefix.
	Exit   = 127
	Prefix = "skein-sandbox: "
	// HasSeccomp: the trampoline can install a seccomp filter on this architecture.
	HasSeccomp = sysSeccomp != 0
)

func init() {
	args := cmdline()
	switch {
	case len(args) == 1 && args[0] == Arg0+"-probe":
		syscall.Exit(0)
	case len(args) >= 4 && args[0] == Arg0:
		run(args[1], args[2], args[3:])
	}
}

// cmdline reads argv from /proc/self/cmdline: os.Args is not set yet when this runs.
func cmdline() []string {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	var data []byte
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(fd, buf)
		if n > 0 {
			data = append(data, buf[:n]...)
		}
		if n <= 0 || err != nil {
			break
		}
	}
	// Cheap exit for every ordinary start: argv[0] must be ours.
	if len(data) < len(Arg0) || string(data[:len(Arg0)]) != Arg0 {
		return nil
	}
	var out []string
	start := 0
	for i, b := range data {
		if b == 0 {
			out = append(out, string(data[start:i]))
			start = i + 1
		}
	}
	return out
}

func fail(msg string) {
	b := []byte(Prefix + msg + "\n")
	_, _ = syscall.Write(2, b)
	syscall.Exit(Exit)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// run applies spec (see prologue.spec in package tools: "resource:cur:max,..." with the
// kernel's resource numbers, then ";n" for no_new_privs, ";l<fd>" for a Landlock ruleset to
// enter and close, ";s<hex>" for a seccomp filter's instructions) and execs path.
func run(spec, path string, argv []string) {
	type limit struct{ res, cur, max uint64 }
	var limits []limit
	var nnp bool
	landlock := -1
	var filter []byte
	items := split(spec, ';')
	for _, item := range items[1:] {
		switch {
		case item == "n":
			nnp = true
		case len(item) > 1 && item[0] == 'l':
			landlock = int(number(item[1:], spec))
		case len(item) > 1 && item[0] == 's' && len(item)%16 == 1:
			filter = unhex(item[1:], spec)
		default:
			fail("bad spec " + spec)
		}
	}
	if items[0] != "" {
		for _, l := range split(items[0], ',') {
			f := split(l, ':')
			if len(f) != 3 {
				fail("bad limit spec " + spec)
			}
			limits = append(limits, limit{number(f[0], spec), number(f[1], spec), number(f[2], spec)})
		}
	}
	// Everything that allocates happens before the limits: once RLIMIT_AS is set, this runtime
	// may not be able to map memory any more.
	argv0p, err := syscall.BytePtrFromString(path)
	if err != nil {
		fail("program path: " + err.Error())
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		fail("arguments: " + err.Error())
	}
	envp, err := syscall.SlicePtrFromStrings(syscall.Environ())
	if err != nil {
		fail("environment: " + err.Error())
	}
	// struct sock_fprog: the number of instructions, then a pointer to them.
	var fprog struct {
		n      uint16
		filter *byte
	}
	if len(filter) > 0 {
		fprog.n, fprog.filter = uint16(len(filter)/8), &filter[0]
	}
	hint := " (the tool runs as uid " + itoa(syscall.Getuid()) + ": its program, interpreter and their folders must be readable by that user; see tools.sandbox.run_as)"
	for _, l := range limits {
		rl := [2]uint64{l.cur, l.max}
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, uintptr(l.res), uintptr(unsafe.Pointer(&rl)), 0, 0, 0); e != 0 {
			fail("set resource limit " + itoa(int(l.res)) + ": " + e.Error())
		}
	}
	// This thread (package initialization runs on the main thread) makes the exec: no_new_privs,
	// the Landlock domain and the seccomp filter are its own, and the exec keeps them.
	if nnp {
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); e != 0 {
			fail("set no_new_privs: " + e.Error())
		}
	}
	if landlock >= 0 {
		if _, _, e := syscall.RawSyscall(sysLandlockRestrictSelf, uintptr(landlock), 0, 0); e != 0 {
			fail("enter a Landlock domain: " + e.Error())
		}
		syscall.Close(landlock)
	}
	if len(filter) > 0 {
		if !HasSeccomp {
			fail("install the seccomp filter: not known on this architecture")
		}
		if _, _, e := syscall.RawSyscall(sysSeccomp, seccompSetModeFilter, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
			fail("install the seccomp filter: " + e.Error())
		}
	}
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE,
		uintptr(unsafe.Pointer(argv0p)), uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	if errno == syscall.EACCES || errno == syscall.EPERM {
		fail("exec " + path + ": " + errno.Error() + hint)
	}
	fail("exec " + path + ": " + errno.Error())
}

// The kernel's numbers the syscall package does not name (the same on every architecture:
// these calls are newer than the per-architecture tables).
const (
	prSetNoNewPrivs         = 38
	seccompSetModeFilter    = 1
	sysLandlockRestrictSelf = 446
)

func split(s string, sep byte) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == sep {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func number(s, spec string) uint64 {
	if s == "" {
		fail("bad spec " + spec)
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			fail("bad spec " + spec)
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return n
}

func unhex(s, spec string) []byte {
	out := make([]byte, len(s)/2)
	for i := range out {
		out[i] = nibble(s[2*i], spec)<<4 | nibble(s[2*i+1], spec)
	}
	return out
}

func nibble(c byte, spec string) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	fail("bad spec " + spec)
	return 0
}
