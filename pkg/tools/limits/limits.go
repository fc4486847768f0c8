// Package limits holds the bounds a tool call runs under that a manifest or the configuration
// may set: resource limits, the ceilings of timeout and output, the seccomp groups a call may be
// allowed. It is a leaf (no skein import), so the configuration checks them without the tool
// runtime.
package limits

import (
	"fmt"
	"strings"
)

// Ceilings of a call's timeout and output, so a typo cannot make a call unbounded.
const (
	MaxTimeoutS      = 3600
	MaxOutputCeiling = 64 << 20
)

// Limits are the resource limits one tool call runs under. Zero means "the host's default" in a
// manifest and "no limit" nowhere: every call has all of them.
type Limits struct {
	// CPUSeconds is RLIMIT_CPU: CPU time, not wall time (timeout_s bounds that).
	CPUSeconds int `json:"cpu_s,omitempty"`
	// AddressSpaceMB is RLIMIT_AS in MiB. Runtimes that reserve much virtual memory (V8, the JVM)
	// need a few GiB even when they use little.
	AddressSpaceMB int `json:"address_space_mb,omitempty"`
	// OpenFiles is RLIMIT_NOFILE.
	OpenFiles int `json:"open_files,omitempty"`
	// Processes bounds the processes (and threads) a call may add: pids.max of the call's cgroup
	// where the pids controller is delegated, and RLIMIT_NPROC of the tool's uid always.
	Processes int `json:"processes,omitempty"`
	// ShmMB is the size in MiB of the call's own /dev/shm, a tmpfs (where calls get their own).
	ShmMB int `json:"shm_mb,omitempty"`
}

// Ceilings of the values a manifest or config may ask for, so a typo cannot unbound a call.
var ceiling = Limits{CPUSeconds: 24 * 3600, AddressSpaceMB: 1 << 20, OpenFiles: 1 << 20, Processes: 1 << 16, ShmMB: 1 << 16}

// Over returns l with every non-zero field of o.
func (l Limits) Over(o Limits) Limits {
	if o.CPUSeconds > 0 {
		l.CPUSeconds = o.CPUSeconds
	}
	if o.AddressSpaceMB > 0 {
		l.AddressSpaceMB = o.AddressSpaceMB
	}
	if o.OpenFiles > 0 {
		l.OpenFiles = o.OpenFiles
	}
	if o.Processes > 0 {
		l.Processes = o.Processes
	}
	if o.ShmMB > 0 {
		l.ShmMB = o.ShmMB
	}
	return l
}

// Check reports the first limit outside [0, ceiling]; prefix names where it was set.
func (l Limits) Check(prefix string) []string {
	var bad []string
	check := func(key string, v, max int) {
		if v < 0 || v > max {
			bad = append(bad, fmt.Sprintf("%s%s must be between 0 (default) and %d, got %d", prefix, key, max, v))
		}
	}
	check("cpu_s", l.CPUSeconds, ceiling.CPUSeconds)
	check("address_space_mb", l.AddressSpaceMB, ceiling.AddressSpaceMB)
	check("open_files", l.OpenFiles, ceiling.OpenFiles)
	check("processes", l.Processes, ceiling.Processes)
	check("shm_mb", l.ShmMB, ceiling.ShmMB)
	return bad
}

// SeccompGroups are the groups of system calls the seccomp filter denies a tool unless its
// manifest's sandbox.seccomp_allow names them: ptrace (and reading or writing another
// process's memory), mount (and the new mount API), modules (loading kernel modules, kexec),
// keyring (the kernel's key store) and namespaces (unshare, setns, clone with a CLONE_NEW*
// flag, clone3).
var SeccompGroups = []string{"ptrace", "mount", "modules", "keyring", "namespaces"}

// SeccompAllowMask is the set of groups names, one bit per group of SeccompGroups; an error
// names the first unknown group.
func SeccompAllowMask(names []string) (uint32, error) {
	var mask uint32
next:
	for _, name := range names {
		for i, g := range SeccompGroups {
			if g == name {
				mask |= 1 << i
				continue next
			}
		}
		return 0, fmt.Errorf("seccomp_allow: unknown group %q (the groups: %s)", name, strings.Join(SeccompGroups, ", "))
	}
	return mask, nil
}
