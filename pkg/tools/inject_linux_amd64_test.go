package tools

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// startStopped starts prog traced and stopped at its exec, and runs fn on the tracer's thread
// with its pid; the process is killed afterwards.
func startStopped(t testing.TB, prog string, fn func(pid int) error) error {
	t.Helper()
	cmd := exec.Command(prog, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	var fnErr error
	err := startLocked(cmd, func(pid int) error {
		if err := waitStopped(pid); err != nil {
			return err
		}
		fnErr = fn(pid)
		return syscall.PtraceDetach(pid)
	})
	if err == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	if err != nil {
		t.Fatalf("start %s: %v", prog, err)
	}
	return fnErr
}

// limitLine is the line of /proc/pid/limits for the named limit.
func limitLine(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	t.Fatalf("no %q in /proc/%d/limits", name, pid)
	return ""
}

// limitsOnly is a prologue of limits alone.
func limitsOnly(limits []rlimit) []selfCall {
	return prologue{limits: limits, landlock: -1}.selfCalls()[:len(limits)]
}

// The tool runs the calls for all its limits in one go, and its code, stack and registers are
// put back: it then runs as if nothing happened.
func TestAToolSetsAllItsLimitsInOneGo(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program")
	}
	limits := callRlimits(Limits{CPUSeconds: 7, AddressSpaceMB: 4096, OpenFiles: 77, Processes: 9}, 100)
	var cpu, as, files, procs string
	var before, after unix.PtraceRegs
	err = startStopped(t, sleep, func(pid int) error {
		if err := unix.PtraceGetRegs(pid, &before); err != nil {
			return err
		}
		if err := runCalls(pid, limitsOnly(limits)); err != nil {
			return err
		}
		if err := unix.PtraceGetRegs(pid, &after); err != nil {
			return err
		}
		cpu, as = limitLine(t, pid, "Max cpu time"), limitLine(t, pid, "Max address space")
		files, procs = limitLine(t, pid, "Max open files"), limitLine(t, pid, "Max processes")
		return nil
	})
	if err != nil {
		t.Fatalf("runCalls: %v", err)
	}
	for got, want := range map[string]string{
		cpu: "Max cpu time 7 9 seconds", as: "Max address space 4294967296 4294967296 bytes",
		files: "Max open files 77 77 files", procs: "Max processes 109 109 processes",
	} {
		if got != want {
			t.Errorf("limit %q, want %q", got, want)
		}
	}
	if before != after {
		t.Errorf("registers not put back:\nbefore %+v\nafter  %+v", before, after)
	}
}

// A limit the kernel refuses stops the calls there and says why.
func TestARefusedLimitIsReported(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program")
	}
	bad := []rlimit{{unix.RLIMIT_NOFILE, 10, 10}, {unix.RLIMIT_CPU, 5, 1}} // soft above hard: EINVAL
	for name, run := range map[string]func(int, []selfCall) error{"runCalls": runCalls, "stepCalls": stepCalls} {
		err = startStopped(t, sleep, func(pid int) error { return run(pid, limitsOnly(bad)) })
		if err == nil || !strings.Contains(err.Error(), "set resource limit 0: invalid argument") {
			t.Errorf("%s with a soft limit above its hard one: %v, want limit 0 (RLIMIT_CPU) invalid argument", name, err)
		}
	}
}

// The whole prologue, one go or one step per call: after it the process has its limits,
// no_new_privs, a Landlock domain (where the kernel has Landlock), the seccomp filter, and no
// Landlock ruleset left open.
func TestAToolRunsItsWholePrologue(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program")
	}
	if err := seccompSupported(); err != nil {
		t.Skipf("no seccomp here: %v", err)
	}
	filter, err := filterFor(0)
	if err != nil {
		t.Fatal(err)
	}
	ll, llErr := newLandlockRuleset()
	for name, run := range map[string]func(int, []selfCall) error{"runCalls": runCalls, "stepCalls": stepCalls} {
		t.Run(name, func(t *testing.T) {
			p := prologue{limits: callRlimits(Limits{CPUSeconds: 7, AddressSpaceMB: 4096, OpenFiles: 77, Processes: 9}, 0), landlock: -1, filter: filter}
			cmd := exec.Command(sleep, "30")
			cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
			if llErr == nil {
				p.landlock = landlockFD
				cmd.ExtraFiles = []*os.File{ll.file}
			}
			var status, files string
			var ferr error
			err := startLocked(cmd, func(pid int) error {
				if err := waitStopped(pid); err != nil {
					return err
				}
				if err := run(pid, p.selfCalls()); err != nil {
					return err
				}
				b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
				status = string(b)
				fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
				for _, fd := range fds {
					files += fd.Name() + " "
				}
				ferr = err
				return syscall.PtraceDetach(pid)
			})
			if err != nil {
				t.Fatal(err)
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if ferr != nil {
				t.Fatal(ferr)
			}
			for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "Seccomp_filters:\t1"} {
				if !strings.Contains(status, want) {
					t.Errorf("status has no %q:\n%s", want, status)
				}
			}
			if strings.Contains(" "+files, " 3 ") {
				t.Errorf("the Landlock ruleset is still open in the tool: fds %s", files)
			}
		})
	}
	if llErr != nil {
		t.Logf("no Landlock here (%v): the prologue ran without it", llErr)
	}
}

// go test -run '^$' -bench SetupInside ./tools/: the tool's prologue (limits alone, and the
// whole of it) made in one go against one step per call, each on a process just stopped at its
// exec (only the prologue is timed).
func BenchmarkSetupInside(b *testing.B) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		b.Skip("no sleep program")
	}
	limits := limitsOnly(callRlimits(DefaultLimits, 100))
	filter, err := filterFor(0)
	if err != nil {
		b.Fatal(err)
	}
	whole := prologue{limits: callRlimits(DefaultLimits, 100), landlock: -1, filter: filter}
	var extra []*os.File
	if ll, err := newLandlockRuleset(); err == nil {
		whole.landlock, extra = landlockFD, []*os.File{ll.file}
	}
	for _, bc := range []struct {
		name  string
		set   func(int, []selfCall) error
		calls []selfCall
	}{
		{"limits/one-go", runCalls, limits}, {"limits/per-call-step", stepCalls, limits},
		{"whole/one-go", runCalls, whole.selfCalls()}, {"whole/per-call-step", stepCalls, whole.selfCalls()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				cmd := exec.Command(sleep, "30")
				cmd.ExtraFiles = extra
				cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
				err := startLocked(cmd, func(pid int) error {
					if err := waitStopped(pid); err != nil {
						return err
					}
					b.StartTimer()
					err := bc.set(pid, bc.calls)
					b.StopTimer()
					if err != nil {
						return err
					}
					return syscall.PtraceDetach(pid)
				})
				if err != nil {
					b.Fatal(err)
				}
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
	}
}
