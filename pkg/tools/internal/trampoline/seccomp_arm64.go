//go:build linux

package trampoline

// sysSeccomp is seccomp(2)'s number on this architecture.
const sysSeccomp = 277
