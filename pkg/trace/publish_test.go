package trace_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// bare starts a server and connects without provisioning: the trace stream is missing, as it
// is leaderless during an election (no stream answers a publish).
func bare(t *testing.T, opts ...bus.Option) (*bus.Conn, protocol.Names) {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, srv.URL(), t.Name(), 5*time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, protocol.NewNames("")
}

func provision(t *testing.T, c *bus.Conn, n protocol.Names) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, c.JS, n, bus.DefaultLimits()); err != nil {
		t.Error(err)
	}
}

func stored(t *testing.T, c *bus.Conn, n protocol.Names, session string) []protocol.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := trace.Read(ctx, c.JS, n, session)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestEventsOutlastAStreamWithoutLeader: events emitted while no stream answers (a leader
// election) are stored once it answers again, and Flush returns only then.
func TestEventsOutlastAStreamWithoutLeader(t *testing.T) {
	c, n := bare(t)
	refused := bustest.Received(t, c.NC)
	p := trace.NewPublisher(c.JS, n, "test")
	for _, ev := range session("s-election") {
		if err := p.Emit(ev); err != nil {
			t.Fatal(err)
		}
	}
	provisioned := make(chan struct{})
	go func() {
		defer close(provisioned)
		// The stream comes back once a publish was refused ("no responders") and is being retried.
		_ = poll.Wait(10*time.Second, refused)
		provision(t, c, n)
	}()
	// Flush returns once the trace stream exists, before the buckets: the connection, which
	// closes when the test ends, must outlive the rest of the provisioning.
	defer func() { <-provisioned }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if got := stored(t, c, n, "s-election"); len(got) != len(session("")) {
		t.Fatalf("stored %d events, emitted %d", len(got), len(session("")))
	}
}

// TestALostAckIsSentAgainOnce: an event whose ack never came is sent again by Flush with the
// same Msg-Id and stored once.
func TestALostAckIsSentAgainOnce(t *testing.T) {
	c, n := bare(t, bus.WithAsyncPublishTimeout(300*time.Millisecond))
	// Something takes the first publish and never answers: its ack is lost.
	hole, err := c.NC.SubscribeSync(n.Trace("s-lost"))
	if err != nil {
		t.Fatal(err)
	}
	p := trace.NewPublisher(c.JS, n, "test")
	if err := p.Emit(protocol.Event{SessionID: "s-lost", Type: protocol.EvSessionStarted, Task: "t"}); err != nil {
		t.Fatal(err)
	}
	first, err := hole.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id := first.Header.Get(nats.MsgIdHdr)
	if id == "" {
		t.Fatal("a trace event carries no Msg-Id, so a resend could store it twice")
	}
	poll.Receive(t, 10*time.Second, "the first publish's ack to time out", c.JS.PublishAsyncComplete())
	if err := hole.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	provision(t, c, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	// A second resend of the same message is one stored event (the stream's duplicate window).
	if _, err := c.JS.PublishMsg(ctx, &nats.Msg{Subject: first.Subject, Data: first.Data, Header: first.Header}); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, c, n, "s-lost"); len(got) != 1 {
		t.Fatalf("stored %d events, want 1", len(got))
	}
}

// TestFlushGivesUpWithTheContext: when the stream never answers, Flush says so when its
// context ends instead of reporting the events stored.
func TestFlushGivesUpWithTheContext(t *testing.T) {
	c, n := bare(t)
	p := trace.NewPublisher(c.JS, n, "test")
	if err := p.Emit(protocol.Event{SessionID: "s-gone", Type: protocol.EvSessionStarted}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err == nil {
		t.Fatal("flush reported success for an event no stream stored")
	}
}
