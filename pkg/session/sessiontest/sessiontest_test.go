package sessiontest_test

import (
	"context"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// The helpers read what a real mesh holds: a session's events up to its usage event, its
// record and its children, and WaitAgent returns once the agent is registered.
func TestHelpersReadARealMesh(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	recs, err := session.Open(ctx, m.Conn.JS, m.Names)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []protocol.Session{{SessionID: "parent", Children: []string{"child"}}, {SessionID: "child", Parent: "parent"}, {SessionID: "other"}} {
		if err := recs.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if got := sessiontest.Record(t, m.Conn, m.Names, "parent"); len(got.Children) != 1 || got.Children[0] != "child" {
		t.Fatalf("record of parent: %+v", got)
	}
	if kids := sessiontest.Children(t, m.Conn, m.Names, "parent"); len(kids) != 1 || kids[0].SessionID != "child" {
		t.Fatalf("children of parent: %+v", kids)
	}

	sessiontest.Publish(t, m.Conn, m.Names, "parent",
		protocol.Event{Type: protocol.EvSessionStarted, Role: "planner"},
		protocol.Event{Type: protocol.EvStepStarted, Role: "executor"},
		protocol.Event{Type: protocol.EvUsage, Role: "planner"},
		protocol.Event{Type: protocol.EvStepStarted, Role: "executor"}, // after the end: not read
	)
	evs := sessiontest.WaitEnd(t, m.Conn, m.Names, "parent")
	if len(evs) != 3 || evs[2].Type != protocol.EvUsage {
		t.Fatalf("WaitEnd read %d events, want 3 ending in usage: %+v", len(evs), evs)
	}
	if got := sessiontest.Only(t, evs, protocol.EvStepStarted, "executor"); got.Role != "executor" {
		t.Fatalf("Only: %+v", got)
	}
	if n := len(sessiontest.Of(evs, protocol.EvStepStarted, "planner")); n != 0 {
		t.Fatalf("Of by role found %d planner step starts, want 0", n)
	}
	if n := len(sessiontest.Events(t, m.Conn, m.Names, "parent")); n != 4 {
		t.Fatalf("Events read %d, want all 4", n)
	}

	agents := bustest.KV(t, m.Conn, m.Names, protocol.BucketAgents)
	go func() { _, _ = agents.Put(context.Background(), "late", []byte("{}")) }()
	bustest.WaitAgent(t, m.Conn, m.Names, "late")
}
