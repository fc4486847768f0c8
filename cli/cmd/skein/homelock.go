package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
)

// homeLock keeps a second embedded NATS server off a $SKEIN_HOME whose JetStream files are in
// use: nats-server does not lock its store directory, and two servers writing one store lose
// data (a `skein run` next to a running `skein up` did exactly that). The lock file also holds
// the running mesh's URL, so the refusal can say what to pass instead.
type homeLock struct {
	f *os.File
}

func lockPath(home string) string { return filepath.Join(home, "mesh.lock") }

// lockHome takes the home's lock without waiting.
func lockHome(home string) (*homeLock, error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("state folder %s: %w", home, err)
	}
	f, err := os.OpenFile(lockPath(home), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", home, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, busyHomeError(home)
		}
		return nil, fmt.Errorf("lock %s: %w", home, err)
	}
	return &homeLock{f: f}, nil
}

func busyHomeError(home string) error {
	url := "nats://127.0.0.1:4222"
	if b, err := os.ReadFile(lockPath(home)); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "nats://") {
		url = strings.TrimSpace(string(b))
	}
	return fail(protocol.ExitUsage, "a mesh is already running on %s (skein up?): pass --nats %s or set SKEIN_NATS_URL, or use another SKEIN_HOME", home, redact.URL(url))
}

// runningMesh reports whether a mesh holds the home's lock, and the URL it listens on ("" for
// the moment between its start and its writing the URL). It creates nothing.
func runningMesh(home string) (url string, running bool) {
	f, err := os.Open(lockPath(home))
	if err != nil {
		return "", false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return "", false
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b)), true
}

// hasMeshState reports whether home holds a mesh's JetStream files (an embedded run or a
// skein up left them).
func hasMeshState(home string) bool {
	st, err := os.Stat(storeDir(home))
	return err == nil && st.IsDir()
}

func storeDir(home string) string { return filepath.Join(home, "nats") }

// setURL records where the mesh holding the lock listens.
func (l *homeLock) setURL(url string) {
	if l == nil {
		return
	}
	_ = l.f.Truncate(0)
	_, _ = l.f.WriteAt([]byte(url+"\n"), 0)
}

// release ends the lock; the file stays (removing it would race with a process taking it).
func (l *homeLock) release() {
	if l == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
}
