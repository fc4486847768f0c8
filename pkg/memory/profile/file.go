package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MaxFileBytes bounds the profile file and its ledger as read from disk.
const MaxFileBytes = 1 << 20

// LedgerPath is where the ledger of the profile at path lives.
func LedgerPath(path string) string { return path + ".patches.json" }

// Load reads the profile file at path and its ledger (empty when there is none yet).
func Load(path string) (string, Ledger, error) {
	text, err := readBounded(path)
	if err != nil {
		return "", Ledger{}, fmt.Errorf("profile: %w", err)
	}
	l, err := loadLedger(path)
	return string(text), l, err
}

func loadLedger(path string) (Ledger, error) {
	var l Ledger
	raw, err := readBounded(LedgerPath(path))
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("profile ledger: %w", err)
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return l, fmt.Errorf("profile ledger %s: %w (move it aside to start a new one)", LedgerPath(path), err)
	}
	return l, nil
}

func readBounded(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxFileBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte limit", path, st.Size(), MaxFileBytes)
	}
	return os.ReadFile(path)
}

// Update changes the ledger of the profile at path under an exclusive lock (the miner and
// `skein profile` may write it at once) and writes it back atomically. fn gets the profile
// file's text; the file itself is never written.
func Update(path string, fn func(text string, l *Ledger) error) error {
	lock, err := os.OpenFile(LedgerPath(path)+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("profile ledger lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("profile ledger lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file releases it too
	text, l, err := Load(path)
	if err != nil {
		return err
	}
	if err := fn(text, &l); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("profile ledger: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".profile-ledger-*")
	if err != nil {
		return fmt.Errorf("profile ledger: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("profile ledger: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("profile ledger: %w", err)
	}
	if err := os.Rename(tmp.Name(), LedgerPath(path)); err != nil {
		return fmt.Errorf("profile ledger: %w", err)
	}
	return nil
}
