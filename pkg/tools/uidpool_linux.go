//go:build linux

package tools

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/skein-mesh/skein/pkg/tools/uidrange"
)

// A root host runs each call as a uid no other running call has (its gid is the same number):
// the kernel then keeps calls from tracing, signalling and reading the /proc files of each
// other, and RLIMIT_NPROC, which counts a uid's tasks, bounds each call alone. The uids come from
// tools.sandbox.uids, a range no account may use. A uid goes back to the pool once every process
// of its call is gone, and the next call takes the uid freed last (so its kept scratch folder,
// see spares, is likely to fit).
//
// Several hosts may share a machine: a host holds each uid it uses with an exclusive lock on a
// file named after it in uidLockDirs, taken when it first needs that uid and kept while it runs
// (the kernel drops it when the process dies), and each host starts looking at a random place
// in the range, so hosts that cannot see each other's lock files (containers) seldom meet.

// uidLockDirs are where a host looks for the folder of its uid lock files, in order: a machine's
// run-time folder, else the system temp folder.
var uidLockDirs = []string{"/run", os.TempDir()}

const uidLockName = "skein-tool-uids"

type uidPool struct {
	first, count int
	dir          string

	mu   sync.Mutex
	free []int            // held uids no call uses now
	held map[int]*os.File // every uid this process holds, with its lock
	next int              // where to look for the next uid to take, from first
}

// newUIDPool checks that no account of the machine uses a uid or gid of the range, and readies
// the lock folder.
func newUIDPool(spec string) (*uidPool, error) {
	if spec == "" {
		spec = DefaultUIDs
	}
	first, count, err := uidrange.Parse(spec)
	if err != nil {
		return nil, err
	}
	for _, f := range []string{"/etc/passwd", "/etc/group"} {
		if name, id, ok := idInRange(f, first, count); ok {
			return nil, fmt.Errorf("%s includes id %d of %q in %s: a tool could act as that account; choose a range no account uses", spec, id, name, f)
		}
	}
	var why []string
	for _, parent := range uidLockDirs {
		dir := filepath.Join(parent, uidLockName)
		if err := lockDir(dir); err != nil {
			why = append(why, err.Error())
			continue
		}
		return &uidPool{first: first, count: count, dir: dir, held: map[int]*os.File{}, next: rand.IntN(count)}, nil
	}
	return nil, fmt.Errorf("no folder for the uid lock files: %s", strings.Join(why, "; "))
}

// idInRange reports the first entry of an /etc/passwd or /etc/group style file whose id (the
// third field) is in the range.
func idInRange(file string, first, count int) (name string, id int, ok bool) {
	f, err := os.Open(file)
	if err != nil {
		return "", 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		if n, err := strconv.Atoi(fields[2]); err == nil && n >= first && n < first+count {
			return fields[0], n, true
		}
	}
	return "", 0, false
}

// lockDir makes dir, or checks the one there: a folder of this process's user that no one else
// may write, so no one else can hold or fake its locks.
func lockDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || st == nil || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is not a folder of uid %d that only it may write", dir, os.Geteuid())
	}
	return nil
}

// take returns a uid no running call uses, on this host or another that shares its lock folder.
func (p *uidPool) take() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		uid := p.free[n-1]
		p.free = p.free[:n-1]
		return uid, nil
	}
	for i := 0; i < p.count; i++ {
		off := (p.next + i) % p.count
		uid := p.first + off
		if _, mine := p.held[uid]; mine {
			continue
		}
		f, err := os.OpenFile(filepath.Join(p.dir, strconv.Itoa(uid)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return 0, fmt.Errorf("uid lock file: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue // another host's
			}
			return 0, fmt.Errorf("lock uid %d: %w", uid, err)
		}
		p.held[uid] = f
		p.next = (off + 1) % p.count
		return uid, nil
	}
	return 0, fmt.Errorf("every uid of tools.sandbox.uids (%d from %d) is in use by a call or held by another toolhost (lock files in %s)", p.count, p.first, p.dir)
}

// put gives back the uid of a call whose processes are all gone.
func (p *uidPool) put(uid int) {
	p.mu.Lock()
	p.free = append(p.free, uid)
	p.mu.Unlock()
}
