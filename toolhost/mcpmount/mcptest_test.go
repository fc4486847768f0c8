package mcpmount

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/tools"
)

// mounted is a running Server with what it listed and logged.
type mounted struct {
	*Server
	mu     sync.Mutex
	lists  [][]Tool
	logs   *logRecorder
	cancel context.CancelFunc
	done   chan struct{}
}

func mount(t *testing.T, name string, cfg config.MCPServer, opts Options) *mounted {
	t.Helper()
	m := &mounted{logs: &logRecorder{}, done: make(chan struct{})}
	if opts.Runner == nil {
		opts.Runner = &tools.Runner{}
	}
	opts.Logger = slog.New(m.logs)
	opts.OnTools = func(ts []Tool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.lists = append(m.lists, ts)
	}
	m.Server = New(name, cfg, opts)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { defer close(m.done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-m.done })
	return m
}

// tool waits for the server to list the skein tool named name.
func (m *mounted) tool(t *testing.T, name string) Tool {
	t.Helper()
	var found Tool
	poll.True(t, 60*time.Second, "the server lists "+name, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.lists) == 0 {
			return false
		}
		last := m.lists[len(m.lists)-1]
		i := slices.IndexFunc(last, func(x Tool) bool { return x.Spec.Name == name })
		if i >= 0 {
			found = last[i]
		}
		return i >= 0
	})
	return found
}

func (m *mounted) listCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.lists)
}

// logRecorder keeps log records for assertions.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// lines are the messages logged at level with every attribute, one string each.
func (l *logRecorder) lines(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if r.Level != level {
			continue
		}
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.Key + "=" + a.Value.String()); return true })
		out = append(out, b.String())
	}
	return out
}
