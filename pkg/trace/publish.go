// Package trace writes and reads session traces: every action of a session is an event on
// skein.trace.<session>, mirrored to JSONL and a human-readable log under $SKEIN_HOME.
package trace

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
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
	data, err := protocol.Marshal(&ev)
	if err != nil {
		return fmt.Errorf("trace %s: %w", ev.Type, err)
	}
	if _, err := p.js.PublishAsync(p.names.Trace(ev.SessionID), data); err != nil {
		return fmt.Errorf("trace %s: publish: %w", ev.Type, err)
	}
	return nil
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
