package trace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Follow delivers a session's events in order from its first one, until fn returns false or ctx
// ends. It uses an ordered consumer, deleted when Follow returns.
func Follow(ctx context.Context, js jetstream.JetStream, names protocol.Names, session string, fn func(protocol.Event) bool) error {
	if err := protocol.IDSession.Check(session); err != nil {
		return fmt.Errorf("follow trace: %w", err)
	}
	s, err := js.Stream(ctx, names.Stream(protocol.StreamTrace))
	if err != nil {
		return fmt.Errorf("trace stream: %w", err)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.Trace(session)},
		InactiveThreshold: followInactive})
	if err != nil {
		return fmt.Errorf("follow trace %s: %w", session, err)
	}
	// The server would keep the consumer for its inactive threshold after the follower leaves;
	// a mesh that follows every session must not collect them, so delete it on the way out.
	defer deleteOrdered(ctx, s, c)
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

// followInactive is how long the server keeps a follower's consumer after its process vanished
// without deleting it (a crash); it must outlast the pull requests' expiry (30 s).
const followInactive = time.Minute

// deleteOrdered removes the server-side consumer an ordered consumer is currently using.
func deleteOrdered(ctx context.Context, s jetstream.Stream, c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = s.DeleteConsumer(dctx, info.Name)
}

// Read returns a session's events stored so far (it does not wait for more). It leaves nothing
// behind on the server (see bus.ReadStream), so a role may call it once per session forever.
func Read(ctx context.Context, js jetstream.JetStream, names protocol.Names, session string) ([]protocol.Event, error) {
	if err := protocol.IDSession.Check(session); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	var out []protocol.Event
	err := bus.ReadStream(ctx, js, names.Stream(protocol.StreamTrace), names.Trace(session), bus.ReadFrom{}, func(m *jetstream.RawStreamMsg) bool {
		var ev protocol.Event
		if err := protocol.Unmarshal(m.Data, &ev); err == nil {
			out = append(out, ev)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", session, err)
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
	var from bus.ReadFrom
	if since > 0 {
		from.Time = time.Now().Add(-since)
	}
	byID := map[string]*SessionSummary{}
	var order []string
	err := bus.ReadStream(ctx, js, names.Stream(protocol.StreamTrace), names.TraceAll(), from, func(m *jetstream.RawStreamMsg) bool {
		var ev protocol.Event
		if protocol.Unmarshal(m.Data, &ev) != nil {
			return true
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
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("list traces: %w", err)
	}
	out := make([]SessionSummary, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	return out, nil
}
