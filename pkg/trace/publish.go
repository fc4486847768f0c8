// Package trace writes and reads session traces: every action of a session is an event on
// skein.trace.<session>, mirrored to JSONL and a human-readable log under $SKEIN_HOME.
package trace

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
)

// Publisher emits trace events without waiting for each ack; Flush waits for them all, and a
// process calls it before it reports the work those events describe.
type Publisher struct {
	js     jetstream.JetStream
	names  protocol.Names
	source string
}

// NewPublisher returns a publisher that stamps events with source (the writing process).
func NewPublisher(js jetstream.JetStream, names protocol.Names, source string) *Publisher {
	return &Publisher{js: js, names: names, source: source}
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
	if _, err := p.js.PublishAsync(p.names.Trace(ev.SessionID), data); err != nil {
		return fmt.Errorf("trace %s: publish: %w", ev.Type, err)
	}
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

// Flush waits until every emitted event is stored.
func (p *Publisher) Flush(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("trace flush: %w", ctx.Err())
	}
}
