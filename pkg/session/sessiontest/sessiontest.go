// Package sessiontest is how tests drive a session through a real mesh and read what it did:
// submit a task, wait for its end, pick events from its trace, read its record. One copy for
// every module's tests, so that each waits the same way (by following the trace, never by
// sleeping).
package sessiontest

import (
	"context"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
	"github.com/skein-mesh/skein/pkg/trace"
)

// EndTimeout bounds a wait for a session to end: a scripted session ends in seconds, but a
// loaded CI machine and a run that recovers from a fault take longer.
const EndTimeout = 90 * time.Second

// Submit sends req to the gateway subject and returns the session id, failing t when the task
// is refused. Wait for the agent first (bustest.WaitAgent) when executors start beside the test.
func Submit(t testing.TB, c *bus.Conn, names protocol.Names, req protocol.SubmitRequest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := Send(ctx, c, names, req)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Follow reads a session's trace up to its end (the planner's usage event, the last event a
// session writes) and returns every event.
func Follow(ctx context.Context, c *bus.Conn, names protocol.Names, id string) ([]protocol.Event, error) {
	var evs []protocol.Event
	err := trace.Follow(ctx, c.JS, names, id, func(ev protocol.Event) bool {
		evs = append(evs, ev)
		return ev.Type != protocol.EvUsage
	})
	return evs, err
}

// WaitEnd is Follow for a test: it fails t when the session has not ended within EndTimeout.
func WaitEnd(t testing.TB, c *bus.Conn, names protocol.Names, id string) []protocol.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), EndTimeout)
	defer cancel()
	evs, err := Follow(ctx, c, names, id)
	if err != nil {
		t.Fatalf("session %s did not end within %v: %v (events so far: %d)", id, EndTimeout, err, len(evs))
	}
	return evs
}

// Events reads the trace a session has written so far.
func Events(t testing.TB, c *bus.Conn, names protocol.Names, id string) []protocol.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := trace.Read(ctx, c.JS, names, id)
	if err != nil {
		t.Fatalf("read trace of %s: %v", id, err)
	}
	return evs
}

// Of picks the events of one type, from one role when role is not empty.
func Of(evs []protocol.Event, typ protocol.EventType, role string) []protocol.Event {
	var out []protocol.Event
	for _, ev := range evs {
		if ev.Type == typ && (role == "" || ev.Role == role) {
			out = append(out, ev)
		}
	}
	return out
}

// Only returns the one event of a type (from role, when not empty), failing t when there is not
// exactly one.
func Only(t testing.TB, evs []protocol.Event, typ protocol.EventType, role string) protocol.Event {
	t.Helper()
	got := Of(evs, typ, role)
	if len(got) != 1 {
		t.Fatalf("%d %s events (role %q), want 1: %+v", len(got), typ, role, evs)
	}
	return got[0]
}

// Record reads a session's record from the sessions bucket.
func Record(t testing.TB, c *bus.Conn, names protocol.Names, id string) protocol.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := session.Open(ctx, c.JS, names)
	if err != nil {
		t.Fatal(err)
	}
	s, err := recs.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Children reads the records of a session's child sessions.
func Children(t testing.TB, c *bus.Conn, names protocol.Names, parent string) []protocol.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := session.Open(ctx, c.JS, names)
	if err != nil {
		t.Fatal(err)
	}
	var out []protocol.Session
	if err := recs.Each(ctx, func(s protocol.Session) bool {
		if s.Parent == parent {
			out = append(out, s)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// Publish writes events to session id's trace as the roles would (each event's SessionID is
// set to id) and waits until the server has stored them all.
func Publish(t testing.TB, c *bus.Conn, names protocol.Names, id string, evs ...protocol.Event) {
	t.Helper()
	pub := trace.NewPublisher(c.JS, names, "test")
	for _, ev := range evs {
		ev.SessionID = id
		if err := pub.Emit(ev); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}
