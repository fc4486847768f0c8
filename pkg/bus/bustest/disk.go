package bustest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a fresh directory and unmounts it when the test ends: a
// real small filesystem to fill. The test is skipped, with the reason, where mounting is not
// permitted (not root, no CAP_SYS_ADMIN, a seccomp profile that denies mount).
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Skipf("cannot mount a tmpfs of %d bytes on %s (%v): this test needs a small real filesystem to fill; run it as root", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file under dir until the filesystem has at most leave bytes free, and returns a
// func that deletes it again.
func Fill(t testing.TB, dir string, leave int64) (free func()) {
	t.Helper()
	f, err := os.CreateTemp(dir, "filler-*")
	if err != nil {
		t.Fatalf("fill %s: %v", dir, err)
	}
	buf := make([]byte, 64<<10)
	for {
		avail := Free(t, dir)
		if avail <= leave {
			break
		}
		n := min(int64(len(buf)), avail-leave)
		if _, err := f.Write(buf[:n]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	if err := f.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fill %s: %v", dir, err)
	}
	name := f.Name()
	return func() {
		if err := os.Remove(name); err != nil {
			t.Errorf("free %s: %v", filepath.Dir(name), err)
		}
	}
}

// Free is the free space of dir's filesystem.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return int64(st.Bavail) * st.Bsize
}
