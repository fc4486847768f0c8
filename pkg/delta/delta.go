// Package delta carries model answers while they are generated. The executor streams each model
// turn through a Turn, which batches the provider's small pieces into protocol.Delta messages on
// Names.Delta(session) (plain NATS: kept nowhere, at most once), one every Options.Flush or
// whenever Options.MaxBytes of text are waiting; Follow reads them. The trace keeps each turn's
// whole text as before, so a reader that missed a piece, or came late, loses only the wait.
package delta

import (
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Defaults of Options.
const (
	DefaultFlush    = 50 * time.Millisecond
	DefaultMaxBytes = 4 << 10
)

// Options bound the batching: a piece waits at most Flush before it is published, and a message
// carries at most MaxBytes of text (at most protocol.MaxDeltaBytes).
type Options struct {
	Flush    time.Duration
	MaxBytes int
}

func (o Options) resolved() Options {
	if o.Flush <= 0 {
		o.Flush = DefaultFlush
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	o.MaxBytes = min(o.MaxBytes, protocol.MaxDeltaBytes)
	return o
}

// Turn streams one model turn of one step. Its methods may be called from any goroutine.
type Turn struct {
	nc   *nats.Conn
	subj string
	o    Options

	mu    sync.Mutex
	head  protocol.Delta // session, step and turn of every message
	buf   []byte
	timer *time.Timer
	seq   int
	shown bool  // some text was published since the turn (re)started
	err   error // the first publish that failed
	done  bool
}

// Start begins streaming turn turn of a step of session.
func Start(nc *nats.Conn, names protocol.Names, session, step string, turn int, o Options) *Turn {
	return &Turn{nc: nc, subj: names.Delta(session), o: o.resolved(),
		head: protocol.Delta{SessionID: session, StepID: step, Turn: turn}}
}

// Text adds a piece of the answer: it goes out with the next batch.
func (t *Turn) Text(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done || s == "" {
		return
	}
	t.buf = append(t.buf, s...)
	for len(t.buf) >= t.o.MaxBytes {
		t.publishLocked(protocol.Delta{Text: t.take(t.o.MaxBytes)})
	}
	if len(t.buf) > 0 && t.timer == nil {
		t.timer = time.AfterFunc(t.o.Flush, t.tick)
	}
}

// Restart tells readers the text so far is void: the model answers again.
func (t *Turn) Restart() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.buf = t.buf[:0] // void as well
	if t.shown {
		t.publishLocked(protocol.Delta{Restart: true})
		t.shown = false
	}
}

// Close publishes what waits, marked done, and returns the first publish error of the turn
// (readers then saw less than the whole answer; the trace still holds it).
func (t *Turn) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return t.err
	}
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	if t.seq > 0 || len(t.buf) > 0 {
		// A turn that streamed nothing (a bare tool call) sends nothing at all.
		t.publishLocked(protocol.Delta{Text: t.take(len(t.buf)), Done: true})
	}
	t.done = true
	return t.err
}

func (t *Turn) tick() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timer = nil
	if !t.done && len(t.buf) > 0 {
		t.publishLocked(protocol.Delta{Text: t.take(len(t.buf))})
	}
}

// take removes up to n bytes of whole characters from the front of the buffer.
func (t *Turn) take(n int) string {
	n = min(n, len(t.buf))
	for n > 0 && n < len(t.buf) && !utf8.RuneStart(t.buf[n]) {
		n--
	}
	if n == 0 { // a character longer than MaxBytes cannot be: MaxBytes is at least 1 KiB in practice
		n = min(len(t.buf), utf8.UTFMax)
	}
	s := string(t.buf[:n])
	t.buf = append(t.buf[:0], t.buf[n:]...)
	return s
}

func (t *Turn) publishLocked(d protocol.Delta) {
	t.seq++
	d.SessionID, d.StepID, d.Turn, d.Seq = t.head.SessionID, t.head.StepID, t.head.Turn, t.seq
	if d.Text != "" {
		t.shown = true
	}
	data, err := protocol.Marshal(&d)
	if err == nil {
		err = t.nc.Publish(t.subj, data)
	}
	if err != nil && t.err == nil {
		t.err = fmt.Errorf("publish delta %d of %s/%s turn %d: %w", d.Seq, d.SessionID, d.StepID, d.Turn, err)
	}
}

// Pending limits of a reader's subscription: a reader that falls this far behind loses pieces
// (the NATS client drops them and reports a slow consumer), never memory.
const (
	PendingMsgs  = 4096
	PendingBytes = 16 << 20
	// followTimeout bounds Follow's round trip to the server.
	followTimeout = 5 * time.Second
)

// Follow calls fn with every delta of session published after it returns (the server has the
// subscription then), in the order they arrive, until the subscription is unsubscribed.
// Messages that cannot be read are skipped.
func Follow(nc *nats.Conn, names protocol.Names, session string, fn func(protocol.Delta)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(names.Delta(session), func(m *nats.Msg) {
		var d protocol.Delta
		if protocol.Unmarshal(m.Data, &d) == nil && d.SessionID == session {
			fn(d)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("follow the deltas of %s: %w", session, err)
	}
	if err := sub.SetPendingLimits(PendingMsgs, PendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("follow the deltas of %s: %w", session, err)
	}
	if err := nc.FlushTimeout(followTimeout); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("follow the deltas of %s: %w", session, err)
	}
	return sub, nil
}

// Shown assembles a session's deltas into what a reader shows of each model turn.
type Shown struct {
	mu    sync.Mutex
	turns map[Key]*TurnText
}

// Key names a model turn of a session.
type Key struct {
	Step string
	Turn int
}

// TurnText is what the deltas of one turn said so far.
type TurnText struct {
	Text string
	// Gap: a piece is missing (a slow reader, or one that came late); Text is not the answer.
	Gap  bool
	Done bool
	next int
}

// Add takes one delta and returns the turn's text after it.
func (s *Shown) Add(d protocol.Delta) TurnText {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turns == nil {
		s.turns = map[Key]*TurnText{}
	}
	k := Key{d.StepID, d.Turn}
	t := s.turns[k]
	if t == nil {
		t = &TurnText{next: 1}
		s.turns[k] = t
	}
	if d.Seq != t.next {
		t.Gap = true
	}
	t.next = d.Seq + 1
	if d.Restart {
		t.Text, t.Gap = "", false
	}
	t.Text += d.Text
	t.Done = t.Done || d.Done
	return *t
}
