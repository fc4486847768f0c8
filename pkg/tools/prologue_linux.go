//go:build linux

package tools

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// prologue is what a tool's process does to itself before its first instruction, in this
// order: its resource limits; no_new_privs (no setuid program or file capability can raise its
// privileges again, and the kernel then lets it install the next two); its own Landlock domain;
// the seccomp filter last, so nothing it denies is needed after it. The host has it done at the
// exec stop (selfCalls) or by the trampoline (spec).
type prologue struct {
	limits []rlimit
	// landlock is the Landlock ruleset's descriptor in the tool's process (closed once
	// applied), or -1.
	landlock int
	filter   *seccompFilter // nil: no seccomp filter
}

// selfCall is one system call a tool stopped at its exec makes on itself.
type selfCall struct {
	nr   uint64
	args [6]uint64
	// data, when not nil, is copied into the tool, at an address the host picks: argument ptr
	// is set to it, and data is built knowing it (for pointers inside).
	data func(at uint64) []byte
	size int
	ptr  int
	what string // names the call in errors
}

// selfCalls are the prologue as system calls.
func (p prologue) selfCalls() []selfCall {
	calls := make([]selfCall, 0, len(p.limits)+4)
	for _, l := range p.limits {
		l := l
		calls = append(calls, selfCall{
			nr: unix.SYS_PRLIMIT64, args: [6]uint64{0, uint64(l.res)}, ptr: 2, size: 16,
			data: func(uint64) []byte {
				return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, l.cur), l.max)
			},
			what: fmt.Sprintf("set resource limit %d", l.res),
		})
	}
	calls = append(calls, selfCall{nr: unix.SYS_PRCTL, args: [6]uint64{unix.PR_SET_NO_NEW_PRIVS, 1}, ptr: -1, what: "set no_new_privs"})
	if p.landlock >= 0 {
		calls = append(calls,
			selfCall{nr: unix.SYS_LANDLOCK_RESTRICT_SELF, args: [6]uint64{uint64(p.landlock)}, ptr: -1, what: "enter a Landlock domain"},
			selfCall{nr: unix.SYS_CLOSE, args: [6]uint64{uint64(p.landlock)}, ptr: -1, what: "close the Landlock ruleset"})
	}
	if f := p.filter; f != nil {
		// struct sock_fprog {unsigned short len; struct sock_filter *filter;}, the filter
		// right after it.
		calls = append(calls, selfCall{
			nr: unix.SYS_SECCOMP, args: [6]uint64{unix.SECCOMP_SET_MODE_FILTER, 0}, ptr: 2, size: 16 + len(f.raw),
			data: func(at uint64) []byte {
				b := binary.LittleEndian.AppendUint64(nil, uint64(len(f.prog)))
				b = binary.LittleEndian.AppendUint64(b, at+16)
				return append(b, f.raw...)
			},
			what: "install the seccomp filter",
		})
	}
	return calls
}

// spec is the prologue for the trampoline's command line: the limits as
// "resource:cur:max,...", then ";n" (no_new_privs), ";l<fd>" (Landlock ruleset) and
// ";s<hex>" (the filter's instructions).
func (p prologue) spec() string {
	parts := make([]string, len(p.limits))
	for i, l := range p.limits {
		parts[i] = fmt.Sprintf("%d:%d:%d", l.res, l.cur, l.max)
	}
	var b strings.Builder
	b.WriteString(strings.Join(parts, ","))
	b.WriteString(";n")
	if p.landlock >= 0 {
		fmt.Fprintf(&b, ";l%d", p.landlock)
	}
	if p.filter != nil {
		b.WriteString(";s")
		b.WriteString(hex.EncodeToString(p.filter.raw))
	}
	return b.String()
}
