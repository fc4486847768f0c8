//go:build linux

package tools

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Each call enters a Landlock domain of its own (landlock_restrict_self in its prologue, from a
// ruleset the host makes once). Landlock lets a process trace, or read the /proc files that
// need trace access (environ, mem, maps, ...) of, only processes of its own domain or of one
// nested in it; from ABI 6 on it may also signal only those. So calls that share a uid (the host
// does not run as root, or tools.sandbox.run_as names one user) still cannot see or signal each
// other or their toolhost. (A tool running as root still read other processes' environ and maps
// in a domain on Linux 6.18, not their mem.) The ruleset restricts no file access but the making
// of device files.
// (go-landlock's API restricts the calling process; a tool must be restricted before its first
// instruction, where only the raw system call can go, and x/sys/unix has the ruleset's types.)

// landlockRuleset is the ruleset every call's domain is made from.
type landlockRuleset struct {
	file *os.File // passed to the tool as landlockFD
	abi  int
}

// landlockFD is the ruleset's descriptor in a tool's process (its first extra file).
const landlockFD = 3

// newLandlockRuleset makes the ruleset, or says why there is none.
func newLandlockRuleset() (*landlockRuleset, error) {
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		switch e {
		case unix.ENOSYS:
			return nil, fmt.Errorf("the kernel has no Landlock (Linux 5.13+, CONFIG_SECURITY_LANDLOCK)")
		case unix.EOPNOTSUPP:
			//lint:ignore ST1005 Landlock is a name
			return nil, fmt.Errorf("Landlock is not enabled (add landlock to the kernel's lsm= boot parameter)")
		}
		return nil, fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK}
	size := unsafe.Offsetof(attr.Handled_access_net) // ABI 1-3 know only the file accesses
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL
		size = unsafe.Offsetof(attr.Quiet_access_fs)
	}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return nil, fmt.Errorf("landlock_create_ruleset (ABI %d): %w", abi, e)
	}
	return &landlockRuleset{file: os.NewFile(fd, "landlock-ruleset"), abi: int(abi)}, nil
}

// signals says whether the domain also keeps a call from signalling processes outside it.
func (l *landlockRuleset) signals() bool { return l.abi >= 6 }
