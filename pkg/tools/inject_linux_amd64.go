//go:build linux && amd64

package tools

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// canSetLimitsInside: this architecture has setLimitsInside.
const canSetLimitsInside = true

// setLimitsInside makes pid, stopped at its exec as the calling thread's tracee, set limits on
// itself. Setting them from outside (prlimit) on a process of another user needs
// CAP_SYS_RESOURCE, which containers usually drop even for root; a process may always lower its
// own. So the tracee runs prlimit64 on itself: a syscall instruction is written over its first
// instruction, its registers are set to the call, it single-steps that one instruction, and then
// the instruction, the stack bytes used for the arguments and its registers are put back. None of
// the tool's own instructions runs before or in between.
func setLimitsInside(pid int, limits []rlimit) error {
	if err := stepLimits(pid, limits); err != nil {
		return &insideError{err}
	}
	return nil
}

func stepLimits(pid int, limits []rlimit) (err error) {
	var saved unix.PtraceRegs
	if err := unix.PtraceGetRegs(pid, &saved); err != nil {
		return fmt.Errorf("read the tool's registers: %w", err)
	}
	if saved.Cs != 0x33 {
		// A 32-bit program: the syscall instruction and its numbers are not the ones below.
		return fmt.Errorf("the tool is not a 64-bit program (code segment %#x)", saved.Cs)
	}
	pc := uintptr(saved.Rip)
	// The limit is passed through memory: 16 bytes well below the stack pointer, in stack the
	// process has not used yet.
	buf := (uintptr(saved.Rsp) - 512) &^ 15
	text := make([]byte, 8)
	stack := make([]byte, 16)
	if _, err := unix.PtracePeekText(pid, pc, text); err != nil {
		return fmt.Errorf("read the tool's first instruction: %w", err)
	}
	if _, err := unix.PtracePeekData(pid, buf, stack); err != nil {
		return fmt.Errorf("read the tool's stack: %w", err)
	}
	code := append([]byte{0x0f, 0x05}, text[2:]...) // syscall
	if _, err := unix.PtracePokeText(pid, pc, code); err != nil {
		return fmt.Errorf("write into the tool: %w", err)
	}
	defer func() {
		_, terr := unix.PtracePokeText(pid, pc, text)
		_, serr := unix.PtracePokeData(pid, buf, stack)
		rerr := unix.PtraceSetRegs(pid, &saved)
		for _, e := range []error{terr, serr, rerr} {
			if err == nil && e != nil {
				err = fmt.Errorf("restore the tool after setting its limits: %w", e)
			}
		}
	}()
	for _, l := range limits {
		var lim [16]byte
		binary.LittleEndian.PutUint64(lim[0:], l.cur)
		binary.LittleEndian.PutUint64(lim[8:], l.max)
		if _, err := unix.PtracePokeData(pid, buf, lim[:]); err != nil {
			return fmt.Errorf("write the limit into the tool: %w", err)
		}
		regs := saved
		// orig_rax -1: the kernel must not take this stop for an interrupted system call to
		// restart when the tracee resumes.
		regs.Orig_rax = ^uint64(0)
		regs.Rax = unix.SYS_PRLIMIT64
		regs.Rdi, regs.Rsi, regs.Rdx, regs.R10 = 0, uint64(l.res), uint64(buf), 0
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
			return fmt.Errorf("set resource limit %d: %w", l.res, syscall.Errno(-ret))
		}
	}
	return nil
}
