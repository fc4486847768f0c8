package devtest

import (
	"bytes"
	"sync"
)

// LogBuffer is a log a test reads while the services it runs write to it (a slog handler's or
// a process's output): safe for concurrent writes and reads.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
