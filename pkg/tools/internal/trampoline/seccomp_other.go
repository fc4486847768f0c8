//go:build linux && !amd64 && !arm64

package trampoline

// sysSeccomp is seccomp(2)'s number on this architecture: 0 here, where the trampoline does not
// know it (HasSeccomp).
const sysSeccomp = 0
