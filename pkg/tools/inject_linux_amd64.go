//go:build linux && amd64

package tools

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// canSetupInside: this architecture has setupInside.
const canSetupInside = true

// setupInside makes pid, stopped at its exec as the calling thread's tracee, run its prologue on
// itself. Setting limits from outside (prlimit) on a process of another user needs
// CAP_SYS_RESOURCE, which containers usually drop even for root, and no_new_privs, a Landlock
// domain and a seccomp filter can only be taken on by a process itself. So the tracee makes the
// calls: code that makes them is written over its first instructions, with their arguments in
// stack it has not used yet, it runs up to a breakpoint, and then its code, those stack bytes
// and its registers are put back. None of the tool's own instructions runs before or in
// between.
//
// Where the code fits (it does after any program's entry point but the tiniest) and
// /proc/<pid>/mem is there, all the calls run in one go: one round trip between host and tool
// instead of one per call, and a few writes instead of one system call per word
// (BenchmarkSetupInside). Elsewhere one syscall instruction is written and single-stepped
// once per call.
func setupInside(pid int, calls []selfCall) error {
	err := runCalls(pid, calls)
	if errors.Is(err, errNoRoom) {
		err = stepCalls(pid, calls)
	}
	if err != nil {
		return &insideError{err}
	}
	return nil
}

// errNoRoom: the code for runCalls could not be written at the tool's entry point (no room
// there, or no /proc/<pid>/mem); nothing ran.
var errNoRoom = errors.New("cannot write the calls at the entry point")

// callRecord is the size of one call in runCalls' table: the number and six arguments.
const callRecord = 7 * 8

// callsCode is x86-64 code that makes the calls in the table at table, each record the system
// call's number and its six arguments, up to a record whose number is -1, and stops at the first
// failure: then rbx points at the failed call's record and rax is its -errno. It ends at a
// breakpoint.
func callsCode(table uint64) []byte {
	code := []byte{0x48, 0xbb} // mov rbx, table
	code = binary.LittleEndian.AppendUint64(code, table)
	return append(code,
		0x48, 0x8b, 0x03, // loop: mov rax, [rbx]
		0x48, 0x83, 0xf8, 0xff, // cmp rax, -1
		0x74, 0x25, // je done
		0x48, 0x8b, 0x7b, 0x08, // mov rdi, [rbx+8]
		0x48, 0x8b, 0x73, 0x10, // mov rsi, [rbx+16]
		0x48, 0x8b, 0x53, 0x18, // mov rdx, [rbx+24]
		0x4c, 0x8b, 0x53, 0x20, // mov r10, [rbx+32]
		0x4c, 0x8b, 0x43, 0x28, // mov r8, [rbx+40]
		0x4c, 0x8b, 0x4b, 0x30, // mov r9, [rbx+48]
		0x0f, 0x05, // syscall
		0x48, 0x85, 0xc0, // test rax, rax
		0x75, 0x06, // jnz done
		0x48, 0x83, 0xc3, callRecord, // add rbx, 56
		0xeb, 0xd2, // jmp loop
		0xcc, // done: int3
	)
}

// callsData lays out the calls' data from at (16-byte aligned each) and sets their pointer
// arguments; it returns the bytes and the calls with their arguments filled in.
func callsData(calls []selfCall, at uint64) ([]byte, [][6]uint64) {
	var data []byte
	args := make([][6]uint64, len(calls))
	for i, c := range calls {
		args[i] = c.args
		if c.data == nil {
			continue
		}
		for len(data)%16 != 0 {
			data = append(data, 0)
		}
		addr := at + uint64(len(data))
		args[i][c.ptr] = addr
		d := c.data(addr)
		if len(d) != c.size {
			panic(fmt.Sprintf("tools: %s: %d bytes of data, %d announced", c.what, len(d), c.size))
		}
		data = append(data, d...)
	}
	return data, args
}

// dataSize is how much room callsData needs for calls (alignment included).
func dataSize(calls []selfCall) int {
	n := 0
	for _, c := range calls {
		if c.data != nil {
			n = (n+15)&^15 + c.size
		}
	}
	return n
}

// runCalls makes the calls in pid (stopped at its exec, the calling thread's tracee) by running
// callsCode at its entry point, then puts back its code, stack and registers.
func runCalls(pid int, calls []selfCall) (err error) {
	saved, err := regs64(pid)
	if err != nil {
		return err
	}
	pc := uintptr(saved.Rip)
	// The table, then the calls' data, well below the stack pointer, in stack not used yet
	// (the kernel maps 128 KiB of stack below it at exec).
	size := callRecord*(len(calls)+1) + dataSize(calls)
	base := (uintptr(saved.Rsp) - 512 - uintptr(size)) &^ 15
	tableSize := callRecord * (len(calls) + 1)
	data, args := callsData(calls, uint64(base)+uint64(tableSize))
	table := make([]byte, 0, tableSize+len(data))
	for i, c := range calls {
		table = binary.LittleEndian.AppendUint64(table, c.nr)
		for _, a := range args[i] {
			table = binary.LittleEndian.AppendUint64(table, a)
		}
	}
	table = binary.LittleEndian.AppendUint64(table, ^uint64(0))
	table = append(table, make([]byte, callRecord-8)...)
	image := append(table, data...)
	code := callsCode(uint64(base))
	// The tool's memory through /proc/<pid>/mem, which its tracer may write even where the pages
	// are read-only (the code): a few reads and writes instead of one system call per word.
	mem, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/mem", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", errNoRoom, err)
	}
	defer mem.Close()
	text := make([]byte, len(code))
	stack := make([]byte, len(image))
	if _, err := mem.ReadAt(text, int64(pc)); err != nil {
		return fmt.Errorf("%w: %v", errNoRoom, err)
	}
	if _, err := mem.ReadAt(stack, int64(base)); err != nil {
		return fmt.Errorf("read the tool's stack: %w", err)
	}
	if _, err := mem.WriteAt(image, int64(base)); err != nil {
		return fmt.Errorf("write the calls into the tool: %w", err)
	}
	if _, err := mem.WriteAt(code, int64(pc)); err != nil {
		_, _ = mem.WriteAt(stack, int64(base))
		return fmt.Errorf("%w: %v", errNoRoom, err)
	}
	defer func() {
		_, terr := mem.WriteAt(text, int64(pc))
		_, serr := mem.WriteAt(stack, int64(base))
		rerr := unix.PtraceSetRegs(pid, &saved)
		for _, e := range []error{terr, serr, rerr} {
			if err == nil && e != nil {
				err = fmt.Errorf("restore the tool after its prologue: %w", e)
			}
		}
	}()
	regs := saved
	regs.Orig_rax = ^uint64(0) // not an interrupted system call to restart
	regs.Rip = uint64(pc)
	if err := unix.PtraceSetRegs(pid, &regs); err != nil {
		return fmt.Errorf("set the tool's registers: %w", err)
	}
	if err := unix.PtraceCont(pid, 0); err != nil {
		return fmt.Errorf("run the tool's prologue: %w", err)
	}
	if ws, err := waitStop(pid); err != nil {
		return fmt.Errorf("wait for the tool's prologue: %w", err)
	} else if ws.StopSignal() != syscall.SIGTRAP {
		return fmt.Errorf("the tool did not reach the end of its prologue (stopped by %v)", ws.StopSignal())
	}
	if err := unix.PtraceGetRegs(pid, &regs); err != nil {
		return fmt.Errorf("read the tool's registers: %w", err)
	}
	if want := uint64(pc) + uint64(len(code)); regs.Rip != want {
		return fmt.Errorf("the tool stopped at %#x, not after its prologue at %#x", regs.Rip, want)
	}
	i := int((regs.Rbx - uint64(base)) / callRecord)
	if regs.Rbx < uint64(base) || i > len(calls) {
		return fmt.Errorf("the tool's prologue stopped at an unknown call (%#x)", regs.Rbx)
	}
	if i < len(calls) {
		return fmt.Errorf("%s: %w", calls[i].what, syscall.Errno(-int64(regs.Rax)))
	}
	return nil
}

// regs64 reads the registers of the stopped tracee pid, a 64-bit program: in a 32-bit one the
// syscall instruction and its numbers are not the ones written here.
func regs64(pid int) (unix.PtraceRegs, error) {
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(pid, &regs); err != nil {
		return regs, fmt.Errorf("read the tool's registers: %w", err)
	}
	if regs.Cs != 0x33 {
		return regs, fmt.Errorf("the tool is not a 64-bit program (code segment %#x)", regs.Cs)
	}
	return regs, nil
}

// stepCalls makes the calls in pid one single-stepped syscall instruction at a time, writing
// word by word: for a program where runCalls has no room.
func stepCalls(pid int, calls []selfCall) (err error) {
	saved, err := regs64(pid)
	if err != nil {
		return err
	}
	pc := uintptr(saved.Rip)
	size := dataSize(calls)
	base := (uintptr(saved.Rsp) - 512 - uintptr(size)) &^ 15
	data, args := callsData(calls, uint64(base))
	for len(data)%8 != 0 {
		data = append(data, 0)
	}
	text := make([]byte, 8)
	stack := make([]byte, len(data))
	if _, err := unix.PtracePeekText(pid, pc, text); err != nil {
		return fmt.Errorf("read the tool's first instruction: %w", err)
	}
	if len(stack) > 0 {
		if _, err := unix.PtracePeekData(pid, base, stack); err != nil {
			return fmt.Errorf("read the tool's stack: %w", err)
		}
	}
	code := append([]byte{0x0f, 0x05}, text[2:]...) // syscall
	if _, err := unix.PtracePokeText(pid, pc, code); err != nil {
		return fmt.Errorf("write into the tool: %w", err)
	}
	defer func() {
		_, terr := unix.PtracePokeText(pid, pc, text)
		var serr error
		if len(stack) > 0 {
			_, serr = unix.PtracePokeData(pid, base, stack)
		}
		rerr := unix.PtraceSetRegs(pid, &saved)
		for _, e := range []error{terr, serr, rerr} {
			if err == nil && e != nil {
				err = fmt.Errorf("restore the tool after its prologue: %w", e)
			}
		}
	}()
	if len(data) > 0 {
		if _, err := unix.PtracePokeData(pid, base, data); err != nil {
			return fmt.Errorf("write the calls' data into the tool: %w", err)
		}
	}
	for i, c := range calls {
		regs := saved
		// orig_rax -1: the kernel must not take this stop for an interrupted system call to
		// restart when the tracee resumes.
		regs.Orig_rax = ^uint64(0)
		regs.Rax = c.nr
		a := args[i]
		regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9 = a[0], a[1], a[2], a[3], a[4], a[5]
		regs.Rip = uint64(pc)
		if err := unix.PtraceSetRegs(pid, &regs); err != nil {
			return fmt.Errorf("set the tool's registers: %w", err)
		}
		if err := unix.PtraceSingleStep(pid); err != nil {
			return fmt.Errorf("step the tool: %w", err)
		}
		if err := waitStopped(pid); err != nil {
			return err
		}
		if err := unix.PtraceGetRegs(pid, &regs); err != nil {
			return fmt.Errorf("read the tool's registers: %w", err)
		}
		if regs.Rip != uint64(pc)+2 {
			return fmt.Errorf("the tool stopped at %#x, not after the one instruction at %#x", regs.Rip, pc)
		}
		if ret := int64(regs.Rax); ret < 0 {
			return fmt.Errorf("%s: %w", c.what, syscall.Errno(-ret))
		}
	}
	return nil
}
