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

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Paths of a session's local mirror files under home.
func JSONLPath(home, session string) string {
	return filepath.Join(home, "traces", session+".jsonl")
}

// LogPath is the human-readable log of a session.
func LogPath(home, session string) string { return filepath.Join(home, "logs", session+".log") }

// Mirror copies every trace event into $home/traces/<session>.jsonl and $home/logs/<session>.log.
// It is a durable consumer, so a restart resumes where it stopped and writes nothing twice.
type Mirror struct {
	JS     jetstream.JetStream
	Names  protocol.Names
	Home   string
	Logger *slog.Logger

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
	c, err := m.JS.CreateOrUpdateConsumer(ctx, m.Names.Stream(protocol.StreamTrace), jetstream.ConsumerConfig{
		Durable:       protocol.ConsumerMirror,
		FilterSubject: m.Names.TraceAll(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1, // one at a time keeps each file in stream order
	})
	if err != nil {
		return fmt.Errorf("trace mirror consumer: %w", err)
	}
	cc, err := c.Consume(func(msg jetstream.Msg) {
		var ev protocol.Event
		if err := protocol.Unmarshal(msg.Data(), &ev); err != nil {
			m.Logger.Warn("trace mirror: skip undecodable event", "subject", msg.Subject(), "err", err)
			_ = msg.Term()
			return
		}
		if err := m.write(ev); err != nil {
			m.Logger.Error("trace mirror: write", "session", ev.SessionID, "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		_ = msg.Ack()
		if ev.Type == protocol.EvUsage {
			m.signal(ev.SessionID)
		}
	})
	if err != nil {
		return fmt.Errorf("trace mirror consume: %w", err)
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

func (m *Mirror) write(ev protocol.Event) error {
	if !protocol.ValidToken(ev.SessionID) {
		return nil // never let a session id name a path outside home
	}
	line, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := appendLine(JSONLPath(m.Home, ev.SessionID), line); err != nil {
		return err
	}
	return appendLine(LogPath(m.Home, ev.SessionID), []byte(Line(ev)))
}

func appendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if st, err := f.Stat(); err == nil && st.Mode().Perm() != 0o600 {
		_ = f.Chmod(0o600) // a file an older version made 0644
	}
	_, werr := f.Write(append(line, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
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
