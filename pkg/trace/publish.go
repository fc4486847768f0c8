// Package trace writes and reads session traces: every action of a session is an event on
// skein.trace.<session>, mirrored to JSONL and a human-readable log under $SKEIN_HOME.
package trace

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
)

// Publisher emits trace events without waiting for each ack; Flush waits for them all, and a
// process calls it before it reports the work those events describe.
//
// An event is never dropped quietly: each carries a Msg-Id, a publish the stream did not answer
// (no leader during an election) is tried again for a while by the client, and one that still
// failed, or whose ack was lost, is sent again by the next Flush (or Emit) with the same Msg-Id,
// which the stream's duplicate window turns into one stored event.
type Publisher struct {
	js     jetstream.JetStream
	names  protocol.Names
	source string
	// idPrefix makes Msg-Ids unique across processes and restarts.
	idPrefix string
	seq      atomic.Uint64

	mu      sync.Mutex
	pending []*sent
	// tidyNext is the length of pending at which Emit tidies next: twice what the last tidy
	// kept, so a backlog (a stream without leader) costs Emit a tidy per doubling, not per event.
	tidyNext int
	// resending admits one Flush at a time to the resends, so a second Flush returns only after
	// the first one's resends are stored too.
	resending chan struct{}
}

// sent is one published event and what became of it.
type sent struct {
	f   jetstream.PubAckFuture
	msg *nats.Msg
	// err is the publish's failure once seen; done is set once it is stored.
	err  error
	done bool
}

const (
	// noLeaderRetries × noLeaderWait is how long the client keeps trying a publish that no
	// stream answered: about a stream leader's election on a cluster.
	noLeaderRetries = 40
	noLeaderWait    = 250 * time.Millisecond
	// tidyAt is how many sent events Emit lets accumulate before it drops those stored and sends
	// the failed ones again (a process that never flushes keeps its list bounded this way).
	tidyAt = 1024
	// MaxUnstored bounds the events kept for resending; beyond it the oldest failed ones are
	// given up, and that is logged as an error.
	MaxUnstored = 8192
)

// NewPublisher returns a publisher that stamps events with source (the writing process).
func NewPublisher(js jetstream.JetStream, names protocol.Names, source string) *Publisher {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &Publisher{js: js, names: names, source: source, resending: make(chan struct{}, 1),
		idPrefix: "ev-" + base64.RawURLEncoding.EncodeToString(b[:]) + "-"}
}

// Emit publishes ev asynchronously. A failed encode is returned; a failed publish surfaces in Flush.
func (p *Publisher) Emit(ev protocol.Event) error {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.Source == "" {
		ev.Source = p.source
	}
	Scrub(&ev)
	data, err := protocol.Marshal(&ev)
	if err != nil {
		return fmt.Errorf("trace %s: %w", ev.Type, err)
	}
	m := &nats.Msg{Subject: p.names.Trace(ev.SessionID), Data: data, Header: nats.Header{}}
	m.Header.Set(nats.MsgIdHdr, p.idPrefix+strconv.FormatUint(p.seq.Add(1), 36))
	f, err := p.send(m)
	if err != nil {
		return fmt.Errorf("trace %s: publish: %w", ev.Type, err)
	}
	p.mu.Lock()
	p.pending = append(p.pending, &sent{f: f, msg: m})
	if len(p.pending) >= max(tidyAt, p.tidyNext) {
		p.tidyLocked()
		p.tidyNext = 2 * len(p.pending)
	}
	p.mu.Unlock()
	return nil
}

func (p *Publisher) send(m *nats.Msg) (jetstream.PubAckFuture, error) {
	return p.js.PublishMsgAsync(m, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(noLeaderWait))
}

// settled reports whether s is resolved, reading its future once.
func (s *sent) settled() bool {
	if s.done || s.err != nil {
		return true
	}
	select {
	case <-s.f.Ok():
		s.done = true
	case err := <-s.f.Err():
		s.err = err
	default:
	}
	return s.done || s.err != nil
}

// tidyLocked drops stored events, sends failed ones again and bounds what is kept.
func (p *Publisher) tidyLocked() {
	kept := p.pending[:0]
	for _, s := range p.pending {
		if !s.settled() {
			kept = append(kept, s)
			continue
		}
		if s.done {
			continue
		}
		if f, err := p.send(s.msg); err == nil {
			s.f, s.err = f, nil
		}
		kept = append(kept, s)
	}
	if over := len(kept) - MaxUnstored; over > 0 {
		slog.Error("trace events given up: the stream has not stored them after repeated tries", "events", over, "err", kept[0].err)
		kept = append(kept[:0], kept[over:]...)
	}
	clear(p.pending[len(kept):])
	p.pending = kept
}

// Flush waits until every emitted event is stored, sending again the ones that failed. It
// returns an error when ctx ends first; the events not yet stored are kept for the next try.
func (p *Publisher) Flush(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
	case <-ctx.Done():
		return fmt.Errorf("trace flush: %w", ctx.Err())
	}
	select {
	case p.resending <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("trace flush: %w", ctx.Err())
	}
	defer func() { <-p.resending }()
	p.mu.Lock()
	list := p.pending
	p.pending = nil
	p.mu.Unlock()
	var keep []*sent
	var err error
	for i, s := range list {
		if err != nil {
			keep = append(keep, list[i:]...)
			break
		}
		if !s.settled() {
			// Emitted after the wait above: a later Flush waits for it.
			keep = append(keep, s)
			continue
		}
		if s.done {
			continue
		}
		if err = p.resend(ctx, s); err != nil {
			keep = append(keep, s)
		}
	}
	if len(keep) > 0 {
		p.mu.Lock()
		p.pending = append(keep, p.pending...)
		p.mu.Unlock()
	}
	return err
}

// resend publishes s again and waits for its ack, trying until ctx ends.
func (p *Publisher) resend(ctx context.Context, s *sent) error {
	first := s.err
	b := backoff.WithContext(backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(0)), ctx)
	err := backoff.Retry(func() error {
		_, err := p.js.PublishMsg(ctx, s.msg, jetstream.WithRetryAttempts(noLeaderRetries), jetstream.WithRetryWait(noLeaderWait))
		var api *jetstream.APIError
		if errors.As(err, &api) {
			return backoff.Permanent(err)
		}
		return err
	}, b)
	if err != nil {
		return fmt.Errorf("trace flush: event on %s not stored (first try: %v): %w", s.msg.Subject, first, err)
	}
	s.done, s.err = true, nil
	return nil
}

// Scrub redacts the parts of an event that carry what tools and models said (arguments,
// results, errors, stderr, text), so no secret enters the trace, its mirror files or the
// guidelines mined from it. The event's result is copied, not changed in place.
func Scrub(ev *protocol.Event) {
	ev.Args = redact.JSON(ev.Args)
	ev.Text = redact.String(ev.Text)
	ev.Reason = redact.String(ev.Reason)
	if ev.Result != nil {
		r := *ev.Result
		r.Error = redact.String(r.Error)
		r.Stderr = redact.String(r.Stderr)
		r.Result = redact.JSON(r.Result)
		ev.Result = &r
	}
}
