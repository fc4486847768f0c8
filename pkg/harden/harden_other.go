//go:build !linux

package harden

func nonDumpable() error { return nil }

// Dumpable reports the current setting (for tests); always true outside Linux.
func Dumpable() (bool, error) { return true, nil }
