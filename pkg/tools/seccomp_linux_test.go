//go:build linux

package tools

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// decide runs the filter on one system call as the kernel would and returns its action: the
// seccomp_data {nr, arch, ip, args[6]} laid out in native order, each 32-bit word of it written
// big-endian because that is how the BPF VM of x/net loads words.
func decide(t *testing.T, vm *bpf.VM, abi *arch.Info, nr int, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], uint32(nr))
	binary.BigEndian.PutUint32(data[4:], uint32(abi.ID))
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))       // low word first: little-endian
		binary.BigEndian.PutUint32(data[16+8*i+4:], uint32(a>>32)) // machines
	}
	ret, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(ret)
}

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// Every denied call of every group is denied on the native ABI and on the 32-bit one (which
// go-seccomp-bpf's policy alone would let through), ordinary calls are not, clone only with a
// namespace flag, and an allowed group gets through.
func TestTheSeccompFilterDecidesAsDocumented(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the filter's 32-bit ABI is known for amd64 and arm64")
	}
	native, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	abis := []*arch.Info{native, compatABI[runtime.GOARCH]}
	vmFor := func(allow uint32) *bpf.VM {
		prog, err := assembleFilter(allow)
		if err != nil {
			t.Fatal(err)
		}
		insts := make([]bpf.Instruction, len(prog))
		for i, in := range prog {
			insts[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}.Disassemble()
		}
		vm, err := bpf.NewVM(insts)
		if err != nil {
			t.Fatal(err)
		}
		return vm
	}
	all := vmFor(0)
	ptraceAllowed := vmFor(1) // SeccompGroups[0] is ptrace
	for _, abi := range abis {
		for group, calls := range seccompCalls {
			for _, name := range calls {
				nr, ok := abi.SyscallNames[name]
				if !ok {
					if abi == native && name != "umount" {
						t.Errorf("%s: no %s on the native ABI", abi.Name, name)
					}
					continue
				}
				if got := decide(t, all, abi, nr); got != retEPERM {
					t.Errorf("%s %s (%s): %#x, want EPERM", abi.Name, name, group, got)
				}
				want := uint32(retEPERM)
				if group == "ptrace" {
					want = retAllow
				}
				if got := decide(t, ptraceAllowed, abi, nr); got != want {
					t.Errorf("ptrace allowed: %s %s: %#x, want %#x", abi.Name, name, got, want)
				}
			}
		}
		clone := abi.SyscallNames["clone"]
		for _, c := range []struct {
			name  string
			nr    int
			flags uint64
			want  uint32
		}{
			{"read", abi.SyscallNames["read"], 0, retAllow},
			{"execve", abi.SyscallNames["execve"], 0, retAllow},
			{"fork-like clone", clone, uint64(unix.SIGCHLD), retAllow},
			{"thread clone", clone, unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD, retAllow},
			// A flag word whose low half equals a denied call's number must not be taken for it.
			{"clone with flags that look like ptrace", clone, uint64(abi.SyscallNames["ptrace"]), retAllow},
			{"clone with flags that look like clone3", clone, uint64(abi.SyscallNames["clone3"]), retAllow},
			{"clone into a user namespace", clone, unix.CLONE_NEWUSER | uint64(unix.SIGCHLD), retEPERM},
			{"clone into a network namespace", clone, unix.CLONE_NEWNET, retEPERM},
			{"clone3", abi.SyscallNames["clone3"], 0, retENOSYS},
		} {
			if got := decide(t, all, abi, c.nr, c.flags); got != c.want {
				t.Errorf("%s %s: %#x, want %#x", abi.Name, c.name, got, c.want)
			}
		}
	}
	if native == arch.X86_64 {
		// The x32 ABI (numbers with bit 30 set) is refused whole, by the library.
		if got := decide(t, all, native, abi32("read")); got != retENOSYS {
			t.Errorf("x32 read: %#x, want ENOSYS", got)
		}
	}
	// Every group allowed: no filter at all.
	if f, err := filterFor(1<<len(SeccompGroups) - 1); err != nil || f != nil {
		t.Errorf("every group allowed: filter %v, err %v; want none", f, err)
	}
}

// abi32 is the x32 number of a call.
func abi32(name string) int {
	return arch.X32.SyscallNames[name] | arch.X32.SeccompMask
}
