//go:build linux

package tools

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Each call gets its own /tmp, /var/tmp and /dev/shm. The thread that starts tools (see onForker)
// moves into a mount namespace of the call's right before it starts one: a new one, where it
// mounts the call's scratch folder on /tmp and /var/tmp and a new tmpfs on /dev/shm, or the one
// kept with a scratch folder an earlier call left empty (see spares), whose /dev/shm that call
// left empty too. It starts the tool, which inherits the namespace, and goes back to the host's.
// Nothing mounted there is seen outside it; it ends, tmpfs and all, once the host lets go of it
// (with its scratch folder) and no process of a call is left in it. Making one and tearing it
// down costs about 0.25 ms on this 2-core machine (BenchmarkCallNamespace), entering a kept one
// a few microseconds. The tool also gets a SysV IPC namespace of its own (CLONE_NEWIPC), so no
// shared-memory segment or message queue outlives the call either. Both need CAP_SYS_ADMIN,
// which a root host has outside a container that drops it.

// privateDirs are the temp folders a call gets to itself (those the machine has); the scratch
// folder is mounted on the first two.
var privateDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// privateTmpDir is where a call with its own /tmp finds its scratch folder: HOME, the working
// directory and TMPDIR.
const privateTmpDir = "/tmp"

// callNS is a call's mount namespace, kept with its scratch folder for the next call of the
// same tool as the same user (see spares) when both are left empty.
type callNS struct {
	scratch string
	shmMB   int
	fd      int // the namespace, held from its making until release (-1: not made yet)
	shm     int // its /dev/shm (-1: none), to tell whether a call left something there
}

func newCallNS(scratch string, shmMB int) *callNS {
	return &callNS{scratch: scratch, shmMB: shmMB, fd: -1, shm: -1}
}

// namespacesMade counts the mount namespaces made for calls (tests see reuse by it).
var namespacesMade atomic.Int64

// hostMountNS is the forker thread's way back to the host's mount namespace, opened on it when
// it starts.
var hostMountNS = -1

// enter moves the calling thread (the forker) into the call's mount namespace, made and set up
// the first time. entered says whether it left the host's namespace: then leaveCallNS must
// follow, error or not.
func (n *callNS) enter() (entered bool, err error) {
	if n.fd >= 0 {
		if err := unix.Setns(n.fd, unix.CLONE_NEWNS); err != nil {
			return false, fmt.Errorf("enter the call's mount namespace: %w", err)
		}
		return true, nil
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return false, fmt.Errorf("make the call's mount namespace: %w", err)
	}
	namespacesMade.Add(1)
	if err = n.mount(); err != nil {
		return true, err
	}
	if n.fd, err = unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		n.fd = -1
		return true, fmt.Errorf("keep the call's mount namespace: %w", err)
	}
	if shm, err := unix.Open("/dev/shm", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		n.shm = shm
	}
	return true, nil
}

func (n *callNS) mount() error {
	// Nothing mounted here may propagate back to the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the call's mounts private: %w", err)
	}
	// /tmp last: the scratch folder may be in the host's /tmp, which that mount covers.
	for i := len(privateDirs) - 1; i >= 0; i-- {
		dir := privateDirs[i]
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		var err error
		if dir == "/dev/shm" {
			err = unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=1777,size=%dm", max(n.shmMB, 1)))
		} else {
			err = unix.Mount(n.scratch, dir, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mount the call's own %s: %w", dir, err)
		}
	}
	return nil
}

// leaveCallNS takes the forker thread back to the host's mount namespace.
func leaveCallNS() error {
	if err := unix.Setns(hostMountNS, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("return to the host's mount namespace: %w", err)
	}
	return nil
}

// empty reports whether the namespace's /dev/shm holds nothing but its root: a tmpfs counts
// its inodes, root included.
func (n *callNS) empty() bool {
	if n == nil || n.shm < 0 {
		return true
	}
	var st unix.Statfs_t
	return unix.Fstatfs(n.shm, &st) == nil && st.Files-st.Ffree <= 1
}

// release lets go of the namespace: it ends when no process of a call is left in it either.
func (n *callNS) release() {
	if n == nil {
		return
	}
	for _, fd := range []*int{&n.fd, &n.shm} {
		if *fd >= 0 {
			_ = unix.Close(*fd)
			*fd = -1
		}
	}
}

// probeMountNS reports whether calls can get their own mount namespace, by making one on the
// forker thread (where calls make theirs) and leaving it.
func probeMountNS() error {
	if hostMountNS < 0 {
		onForker(func() {}) // opens hostMountNS
	}
	if hostMountNS < 0 {
		return errors.New("the forker thread cannot open its mount namespace")
	}
	var err error
	onForker(func() {
		n := newCallNS("/", 1)
		entered, eerr := n.enter()
		n.release()
		err = eerr
		if entered {
			if lerr := leaveCallNS(); lerr != nil {
				forkerLost = fmt.Errorf("tools cannot start any more: %w", lerr)
				err = errors.Join(err, lerr)
			}
		}
	})
	return err
}

// privateDirsReal are privateDirs and where they lead, for hiddenByPrivateTmp.
var privateDirsReal = sync.OnceValue(func() []string {
	dirs := append([]string(nil), privateDirs...)
	for _, d := range privateDirs {
		if real, err := filepath.EvalSymlinks(d); err == nil && real != d {
			dirs = append(dirs, real)
		}
	}
	return dirs
})

// hiddenByPrivateTmp reports the first of paths that lies in a folder a call with its own /tmp
// sees replaced (its program, or the manifest's folder, cannot live there).
func hiddenByPrivateTmp(paths ...string) (string, bool) {
	for _, p := range paths {
		if p == "" {
			continue
		}
		for _, dir := range privateDirsReal() {
			if p == dir || strings.HasPrefix(p, dir+"/") {
				return p, true
			}
		}
	}
	return "", false
}
