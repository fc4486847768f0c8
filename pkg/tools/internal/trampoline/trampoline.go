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

// run applies spec ("resource:cur:max,..." with the kernel's resource numbers) and execs path.
func run(spec, path string, argv []string) {
	type limit struct{ res, cur, max uint64 }
	var limits []limit
	var field [3]uint64
	k := 0
	for i := 0; i <= len(spec); i++ {
		if i == len(spec) || spec[i] == ',' {
			if k != 2 {
				fail("bad limit spec " + spec)
			}
			limits = append(limits, limit{field[0], field[1], field[2]})
			field, k = [3]uint64{}, 0
			continue
		}
		c := spec[i]
		switch {
		case c == ':' && k < 2:
			k++
		case c >= '0' && c <= '9':
			field[k] = field[k]*10 + uint64(c-'0')
		default:
			fail("bad limit spec " + spec)
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
	hint := " (the tool runs as uid " + itoa(syscall.Getuid()) + ": its program, interpreter and their folders must be readable by that user; see tools.sandbox.run_as)"
	for _, l := range limits {
		rl := [2]uint64{l.cur, l.max}
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, uintptr(l.res), uintptr(unsafe.Pointer(&rl)), 0, 0, 0); e != 0 {
			fail("set resource limit " + itoa(int(l.res)) + ": " + e.Error())
		}
	}
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE,
		uintptr(unsafe.Pointer(argv0p)), uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	if errno == syscall.EACCES || errno == syscall.EPERM {
		fail("exec " + path + ": " + errno.Error() + hint)
	}
	fail("exec " + path + ": " + errno.Error())
}
