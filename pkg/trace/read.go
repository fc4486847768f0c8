package trace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Follow delivers a session's events in order from its first one, until fn returns false or ctx
// ends. It uses an ordered consumer, so nothing is left behind on the server.
func Follow(ctx context.Context, js jetstream.JetStream, names protocol.Names, session string, fn func(protocol.Event) bool) error {
	s, err := js.Stream(ctx, names.Stream(protocol.StreamTrace))
	if err != nil {
		return fmt.Errorf("trace stream: %w", err)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.Trace(session)}})
	if err != nil {
		return fmt.Errorf("follow trace %s: %w", session, err)
	}
	it, err := c.Messages()
	if err != nil {
		return fmt.Errorf("follow trace %s: %w", session, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("follow trace %s: %w", session, err)
		}
		var ev protocol.Event
		if err := protocol.Unmarshal(msg.Data(), &ev); err != nil {
			continue // a foreign or newer message cannot be shown; keep following
		}
		if !fn(ev) {
			return nil
		}
	}
}

// Read returns a session's events stored so far (it does not wait for more).
func Read(ctx context.Context, js jetstream.JetStream, names protocol.Names, session string) ([]protocol.Event, error) {
	s, err := js.Stream(ctx, names.Stream(protocol.StreamTrace))
	if err != nil {
		return nil, fmt.Errorf("trace stream: %w", err)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.Trace(session)}})
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", session, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", session, err)
	}
	pending := info.NumPending
	var out []protocol.Event
	for pending > 0 {
		batch, err := c.Fetch(int(min(pending, 500)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read trace %s: %w", session, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			var ev protocol.Event
			if err := protocol.Unmarshal(msg.Data(), &ev); err == nil {
				out = append(out, ev)
			}
		}
		if n == 0 {
			break
		}
		pending -= uint64(n)
	}
	return out, nil
}

// SessionSummary is one line of `skein trace list`.
type SessionSummary struct {
	SessionID string
	Agent     string
	Task      string
	Outcome   protocol.Outcome
	Started   time.Time
	Events    int
}

// List summarizes the sessions found in the trace stream, oldest first.
func List(ctx context.Context, js jetstream.JetStream, names protocol.Names, since time.Duration) ([]SessionSummary, error) {
	s, err := js.Stream(ctx, names.Stream(protocol.StreamTrace))
	if err != nil {
		return nil, fmt.Errorf("trace stream: %w", err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.TraceAll()}}
	if since > 0 {
		t := time.Now().Add(-since)
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &t
	}
	c, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("list traces: %w", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("list traces: %w", err)
	}
	byID := map[string]*SessionSummary{}
	var order []string
	pending := info.NumPending
	for pending > 0 {
		batch, err := c.Fetch(int(min(pending, 1000)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("list traces: %w", err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			var ev protocol.Event
			if protocol.Unmarshal(msg.Data(), &ev) != nil {
				continue
			}
			sum := byID[ev.SessionID]
			if sum == nil {
				sum = &SessionSummary{SessionID: ev.SessionID, Started: ev.Time}
				byID[ev.SessionID] = sum
				order = append(order, ev.SessionID)
			}
			sum.Events++
			if ev.Type == protocol.EvSessionStarted {
				sum.Agent, sum.Task = ev.Agent, ev.Task
			}
			if ev.Type.Terminal() {
				sum.Outcome = ev.Outcome
			}
		}
		if n == 0 {
			break
		}
		pending -= uint64(n)
	}
	out := make([]SessionSummary, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	return out, nil
}
