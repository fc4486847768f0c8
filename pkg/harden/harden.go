// Package harden protects a process that holds secrets (provider keys, NATS credentials) from
// the other processes of its user, tools above all.
package harden

// Process makes this process non-dumpable (prctl PR_SET_DUMPABLE 0): another process of the
// same user can no longer read its /proc/<pid>/environ, /proc/<pid>/mem or attach a debugger,
// and no core file is written. A process with CAP_SYS_PTRACE (root) still can, which is why the
// tool runner runs tools as nobody when the mesh runs as root. Call it first thing in main; it
// is a no-op outside Linux. The error is only for tests: main ignores it, since a process that
// cannot harden itself still works.
func Process() error { return nonDumpable() }
