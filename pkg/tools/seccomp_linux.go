//go:build linux

package tools

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter every tool gets, installed with no_new_privs before its first instruction
// (by the tool on itself at the exec stop, or by the trampoline) and inherited by everything it
// starts: a deny list, so any program runs, of the system calls a tool has no business making
// and that reach the kernel's most exposed code or other processes. A denied call fails with
// EPERM; clone3 fails with ENOSYS instead, so that C libraries fall back to clone, whose flags
// the filter can read (clone3 passes them in memory). A manifest lets its tool use whole groups
// again (sandbox.seccomp_allow), for instance "namespaces" for a browser's own sandbox.

// seccompCalls are the system calls of each group of SeccompGroups (umount exists on 32-bit ABIs
// only). namespaces also covers clone with a CLONE_NEW* flag (cloneNewMask) and clone3; a plain
// fork or thread stays allowed.
var seccompCalls = map[string][]string{
	// Reading or steering another process, even one of the same uid.
	"ptrace":  {"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd"},
	"mount":   {"mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"},
	"modules": {"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load"},
	"keyring": {"add_key", "request_key", "keyctl"},
	// New namespaces, a user namespace above all, give a process capabilities over kernel code
	// that unprivileged users cannot otherwise reach.
	"namespaces": {"unshare", "setns"},
}

// cloneNewMask is every CLONE_NEW* flag clone can take. (CLONE_NEWTIME shares its bit with
// clone's exit signal and is only accepted by unshare and clone3, which are denied.)
const cloneNewMask = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// seccompFilter is one assembled filter: the instructions as the kernel takes them.
type seccompFilter struct {
	prog []unix.SockFilter
	raw  []byte // prog as bytes, for the tool's memory or the trampoline's command line
}

var seccompFilters struct {
	sync.Mutex
	m map[uint32]*seccompFilter
}

// filterFor returns the filter that denies every group not in allow, assembled once per set;
// nil when allow names every group.
func filterFor(allow uint32) (*seccompFilter, error) {
	seccompFilters.Lock()
	defer seccompFilters.Unlock()
	if f, ok := seccompFilters.m[allow]; ok {
		return f, nil
	}
	prog, err := assembleFilter(allow)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	if seccompFilters.m == nil {
		seccompFilters.m = map[uint32]*seccompFilter{}
	}
	if prog == nil {
		seccompFilters.m[allow] = nil
		return nil, nil
	}
	raw := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		raw = binary.NativeEndian.AppendUint16(raw, in.Code)
		raw = append(raw, in.Jt, in.Jf)
		raw = binary.NativeEndian.AppendUint32(raw, in.K)
	}
	f := &seccompFilter{prog: prog, raw: raw}
	seccompFilters.m[allow] = f
	return f, nil
}

// compatABI is the 32-bit ABI a 64-bit kernel also runs, whose system call numbers differ: a
// filter that checked only the native numbers would let `int 0x80` through.
var compatABI = map[string]*arch.Info{"amd64": arch.I386, "arm64": arch.ARM}

var errnoENOSYS = seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)

// assembleFilter builds the filter with go-seccomp-bpf: its policy for the native ABI (which
// also refuses the x32 ABI), preceded by the same rules for the compat ABI, which the library's
// policy would let through by default. Within each, clone3 comes first and the one call with an
// argument condition (clone) last: the library compares later system call numbers with whatever
// the condition loaded last.
func assembleFilter(allow uint32) ([]unix.SockFilter, error) {
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	groups := denyGroups(native, allow)
	if len(groups) == 0 {
		return nil, nil
	}
	policy := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
	prog, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	if compat := compatABI[runtime.GOARCH]; compat != nil {
		p := seccomp.NewProgram()
		for _, g := range denyGroups(compat, allow) {
			assembleGroup(&p, compat, g)
		}
		p.Ret(seccomp.ActionAllow)
		section, err := p.Assemble()
		if err != nil {
			return nil, fmt.Errorf("compat ABI %s: %w", compat.Name, err)
		}
		section = append([]bpf.Instruction{bpf.LoadAbsolute{Off: 0, Size: 4}}, section...)
		if len(section) > 255 {
			return nil, fmt.Errorf("compat ABI %s: %d instructions do not fit a short jump", compat.Name, len(section))
		}
		guard := []bpf.Instruction{
			bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(compat.ID), SkipFalse: uint8(len(section))},
		}
		prog = append(append(guard, section...), prog...)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, in := range raw {
		out[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return out, nil
}

// denyGroups are the library's syscall groups for one ABI: clone3 (ENOSYS), then every denied
// call (EPERM) with the conditional clone last. Names an ABI does not have are left out.
func denyGroups(abi *arch.Info, allow uint32) []seccomp.SyscallGroup {
	var names []string
	namespaces := true
	for i, g := range SeccompGroups {
		if allow&(1<<i) != 0 {
			if g == "namespaces" {
				namespaces = false
			}
			continue
		}
		for _, c := range seccompCalls[g] {
			if _, ok := abi.SyscallNames[c]; ok {
				names = append(names, c)
			}
		}
	}
	var groups []seccomp.SyscallGroup
	if namespaces {
		groups = append(groups, seccomp.SyscallGroup{Names: []string{"clone3"}, Action: errnoENOSYS})
	}
	deny := seccomp.SyscallGroup{Names: names, Action: seccomp.ActionErrno}
	if namespaces {
		deny.NamesWithCondtions = []seccomp.NameWithConditions{{Name: "clone", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewMask},
		}}}
	}
	if len(names)+len(deny.NamesWithCondtions) > 0 {
		groups = append(groups, deny)
	}
	return groups
}

// assembleGroup is go-seccomp-bpf's SyscallGroup.Assemble for an ABI other than the native one
// (the library's groups take their ABI from an unexported field).
func assembleGroup(p *seccomp.Program, abi *arch.Info, g seccomp.SyscallGroup) {
	var calls []seccomp.SyscallWithConditions
	for _, name := range g.Names {
		calls = append(calls, seccomp.SyscallWithConditions{Num: uint32(abi.SyscallNames[name])})
	}
	for _, nc := range g.NamesWithCondtions {
		calls = append(calls, seccomp.SyscallWithConditions{Num: uint32(abi.SyscallNames[nc.Name]), Conditions: []seccomp.ArgumentConditions{nc.Conditions}})
	}
	action, next := p.NewLabel(), p.NewLabel()
	for i, c := range calls {
		c.Assemble(p, i < len(calls)-1, action, next)
	}
	p.SetLabel(action)
	p.Ret(g.Action)
	p.SetLabel(next)
}

// seccompSupported reports whether this kernel takes seccomp filters that return an errno.
func seccompSupported() error {
	action := uint32(unix.SECCOMP_RET_ERRNO)
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	if e != 0 {
		return fmt.Errorf("seccomp(SECCOMP_GET_ACTION_AVAIL): %w", e)
	}
	return nil
}
