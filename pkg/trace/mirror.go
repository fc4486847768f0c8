package trace

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/worker"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Paths of a session's local mirror files under home.
func JSONLPath(home, session string) string {
	return filepath.Join(home, "traces", session+".jsonl")
}

// LogPath is the human-readable log of a session.
func LogPath(home, session string) string { return filepath.Join(home, "logs", session+".log") }

// Mirror copies every trace event into $home/traces/<session>.jsonl and $home/logs/<session>.log.
// It is a durable consumer run by the mesh's one JetStream worker (settings in bus.Consumers,
// kind bus.KindMirror), so a restart resumes where it stopped and writes nothing twice, and an
// event that cannot be decoded or written reaches the DLQ with its reason.
type Mirror struct {
	Conn   *bus.Conn
	Names  protocol.Names
	Home   string
	Logger *slog.Logger
	// AckWait is mesh.ack_wait (0: the table's default).
	AckWait time.Duration

	// files keeps the mirror files of the sessions written last open, so a session's events
	// each cost a write, not an open, stat and close of two files.
	files openFiles

	mu   sync.Mutex
	done map[string]chan struct{}
	// ended lists the sessions whose channel is closed, oldest first, so the map stays bounded
	// on a mesh that runs sessions for months.
	ended []string
}

// mirrorKeepEnded is how many ended sessions' Done channels are kept; Done on an older one
// waits for an event that already passed (callers wait with a limit).
const mirrorKeepEnded = 1024

// Run mirrors until ctx ends.
func (m *Mirror) Run(ctx context.Context) error {
	for _, d := range []string{"traces", "logs"} {
		// Traces hold task text and tool output: readable by the mesh's user only.
		dir := filepath.Join(m.Home, d)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("trace mirror: %w", err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("trace mirror: %w", err)
		}
	}
	logger := m.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	spec, err := bus.Consumers(m.Names, bus.KindMirror, "", m.AckWait)
	if err != nil {
		return fmt.Errorf("trace mirror: %w", err)
	}
	w, err := worker.New(ctx, m.Conn, m.Names, spec, worker.Options{Logger: logger, Acked: m.acked}, m.handle)
	if err != nil {
		return fmt.Errorf("trace mirror: %w", err)
	}
	defer m.files.closeAll()
	return w.Run(ctx)
}

func (m *Mirror) handle(_ context.Context, msg jetstream.Msg) error {
	var ev protocol.Event
	if err := worker.Decode(msg, &ev); err != nil {
		return err
	}
	if err := m.write(ev); err != nil {
		return fmt.Errorf("trace mirror: write session %s: %w", ev.SessionID, err)
	}
	return nil
}

// acked tells Done's waiters once a session's usage event is written and acked, so a one-shot
// run stopping its mesh then leaves nothing to mirror again on the next start.
func (m *Mirror) acked(msg jetstream.Msg) {
	var ev protocol.Event
	if protocol.Unmarshal(msg.Data(), &ev) == nil && ev.Type == protocol.EvUsage {
		m.signal(ev.SessionID)
	}
}

func (m *Mirror) write(ev protocol.Event) error {
	if !protocol.IDSession.Valid(ev.SessionID) {
		return nil // never let a session id name a path outside home
	}
	line, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := m.files.append(JSONLPath(m.Home, ev.SessionID), line); err != nil {
		return err
	}
	err = m.files.append(LogPath(m.Home, ev.SessionID), []byte(Line(ev)))
	if ev.Type == protocol.EvUsage && ev.Role != protocol.RoleMiner {
		// The session has ended; the miner's few later events open the files again.
		m.files.close(JSONLPath(m.Home, ev.SessionID), LogPath(m.Home, ev.SessionID))
	}
	return err
}

// mirrorOpenFiles bounds the files the mirror keeps open (two per session in flight).
const mirrorOpenFiles = 64

// openFiles is a small set of files open for appending, the least recently used closed first.
type openFiles struct {
	mu    sync.Mutex
	files map[string]*openFile
	tick  uint64
}

type openFile struct {
	f    *os.File
	used uint64
}

// append writes line and a newline at the end of path, opening it (0600) unless it is open.
func (o *openFiles) append(path string, line []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.files == nil {
		o.files = map[string]*openFile{}
	}
	of := o.files[path]
	if of == nil {
		f, err := openAppend(path)
		if err != nil {
			return err
		}
		if len(o.files) >= mirrorOpenFiles {
			o.evictLocked()
		}
		of = &openFile{f: f}
		o.files[path] = of
	}
	o.tick++
	of.used = o.tick
	if _, err := of.f.Write(append(line, '\n')); err != nil {
		_ = of.f.Close()
		delete(o.files, path)
		return err
	}
	return nil
}

func (o *openFiles) evictLocked() {
	var oldest string
	for p, of := range o.files {
		if oldest == "" || of.used < o.files[oldest].used {
			oldest = p
		}
	}
	_ = o.files[oldest].f.Close()
	delete(o.files, oldest)
}

func (o *openFiles) close(paths ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range paths {
		if of := o.files[p]; of != nil {
			_ = of.f.Close()
			delete(o.files, p)
		}
	}
}

func (o *openFiles) closeAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for p, of := range o.files {
		_ = of.f.Close()
		delete(o.files, p)
	}
}

func openAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.Mode().Perm() != 0o600 {
		_ = f.Chmod(0o600) // a file an older version made 0644
	}
	return f, nil
}

// Done returns a channel closed once the session's usage event is mirrored, so a one-shot run
// can stop its embedded mesh without cutting the files short.
func (m *Mirror) Done(session string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.doneLocked(session)
}

func (m *Mirror) doneLocked(session string) chan struct{} {
	if m.done == nil {
		m.done = map[string]chan struct{}{}
	}
	ch, ok := m.done[session]
	if !ok {
		ch = make(chan struct{})
		m.done[session] = ch
	}
	return ch
}

func (m *Mirror) signal(session string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.doneLocked(session)
	select {
	case <-ch:
	default:
		close(ch)
		m.ended = append(m.ended, session)
		if len(m.ended) > mirrorKeepEnded {
			delete(m.done, m.ended[0])
			m.ended = m.ended[1:]
		}
	}
}
