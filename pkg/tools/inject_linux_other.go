//go:build linux && !amd64

package tools

import "errors"

// canSetupInside: setupInside is written for amd64 only; elsewhere a tool of another user starts
// through the trampoline where the host lacks CAP_SYS_RESOURCE, and every tool does where its
// prologue has more than limits (see prologue).
const canSetupInside = false

func setupInside(pid int, calls []selfCall) error {
	return &insideError{errors.New("a tool's prologue at its exec is implemented on amd64 only")}
}
