package limits

import (
	"strings"
	"testing"
)

// Each group sets its own bit; an unknown group is named in the error with the known ones.
func TestSeccompAllowMask(t *testing.T) {
	m, err := SeccompAllowMask([]string{"namespaces", "ptrace"})
	if err != nil || m != 1<<4|1<<0 {
		t.Fatalf("mask %b, %v; want %b", m, err, 1<<4|1<<0)
	}
	if _, err := SeccompAllowMask([]string{"ptrace", "sockets"}); err == nil || !strings.Contains(err.Error(), `"sockets"`) ||
		!strings.Contains(err.Error(), strings.Join(SeccompGroups, ", ")) {
		t.Fatalf("unknown group: %v", err)
	}
}

// Check names each limit outside [0, ceiling] under its prefix; Over takes only set fields.
func TestCheckAndOver(t *testing.T) {
	bad := Limits{CPUSeconds: -1, ShmMB: 1 << 20}.Check("sandbox.")
	if len(bad) != 2 || !strings.HasPrefix(bad[0], "sandbox.cpu_s ") || !strings.HasPrefix(bad[1], "sandbox.shm_mb ") {
		t.Fatalf("check: %q", bad)
	}
	if bad := (Limits{CPUSeconds: 10}).Check(""); bad != nil {
		t.Fatalf("check of good limits: %q", bad)
	}
	got := Limits{CPUSeconds: 300, OpenFiles: 1024}.Over(Limits{OpenFiles: 64})
	if got != (Limits{CPUSeconds: 300, OpenFiles: 64}) {
		t.Fatalf("over: %+v", got)
	}
}
