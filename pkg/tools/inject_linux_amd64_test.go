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
		if err := runLimits(pid, limits); err != nil {
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
		t.Fatalf("runLimits: %v", err)
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
	err = startStopped(t, sleep, func(pid int) error { return runLimits(pid, bad) })
	if err == nil || !strings.Contains(err.Error(), "invalid argument") {
		t.Fatalf("runLimits with a soft limit above its hard one: %v, want invalid argument", err)
	}
}

// go test -run '^$' -bench LimitsInside ./tools/: the tool's limits set in one go against one
// step per limit, on one process stopped at its exec (each run puts everything back).
func BenchmarkLimitsInside(b *testing.B) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		b.Skip("no sleep program")
	}
	limits := callRlimits(DefaultLimits, 100)
	for _, bc := range []struct {
		name string
		set  func(int, []rlimit) error
	}{{"one-go", runLimits}, {"per-limit-step", stepLimits}} {
		b.Run(bc.name, func(b *testing.B) {
			err := startStopped(b, sleep, func(pid int) error {
				b.ResetTimer()
				defer b.StopTimer()
				for range b.N {
					if err := bc.set(pid, limits); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
