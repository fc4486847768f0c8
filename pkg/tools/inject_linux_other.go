//go:build linux && !amd64

package tools

import "errors"

// canSetLimitsInside: setLimitsInside is written for amd64 only; elsewhere a tool of another
// user starts through the trampoline where the host lacks CAP_SYS_RESOURCE.
const canSetLimitsInside = false

func setLimitsInside(pid int, limits []rlimit) error {
	return &insideError{errors.New("setting limits inside the tool is not implemented on this architecture")}
}
