package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func TestProvisionIsIdempotentAndStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := protocol.NewNames("")

	srv, err := embedded.Start(embedded.Options{StoreDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := bus.Connect(ctx, srv.URL(), "t", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := bus.Provision(ctx, c.JS, names, bus.DefaultLimits()); err != nil {
			t.Fatalf("provision #%d: %v", i+1, err)
		}
	}
	if _, err := c.JS.Publish(ctx, names.Task("a"), []byte("x"), jetstream.WithMsgID("s1")); err != nil {
		t.Fatal(err)
	}
	ack, err := c.JS.Publish(ctx, names.Task("a"), []byte("x"), jetstream.WithMsgID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate {
		t.Fatal("second publish with the same Msg-Id was not deduplicated")
	}
	c.Close()
	srv.Shutdown()

	srv2, err := embedded.Start(embedded.Options{StoreDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Shutdown()
	c2, err := bus.Connect(ctx, srv2.URL(), "t2", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s, err := c2.JS.Stream(ctx, names.Stream(protocol.StreamTasks))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("after restart TASKS holds %d messages, want 1", info.State.Msgs)
	}
}

func TestRequestRetriesUntilResponderAppearsAndRefusesUnknownVersion(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subj := m.Names.Submit()
	// The responder appears once the first try was answered "no responders".
	refused := bustest.Received(t, m.Conn.NC)
	go func() {
		_ = poll.Wait(10*time.Second, refused)
		_, _ = m.Conn.NC.Subscribe(subj, func(msg *nats.Msg) {
			var req protocol.SubmitRequest
			if err := protocol.Unmarshal(msg.Data, &req); err != nil {
				return
			}
			out, _ := protocol.Marshal(&protocol.SubmitReply{SessionID: "echo-" + req.Task})
			_ = msg.Respond(out)
		})
	}()
	var reply protocol.SubmitReply
	if err := bus.Request(ctx, m.Conn.NC, subj, &protocol.SubmitRequest{Task: "t"}, &reply, time.Second); err != nil {
		t.Fatal(err)
	}
	if reply.SessionID != "echo-t" {
		t.Fatalf("reply %+v", reply)
	}

	bad, _ := protocol.Marshal(&protocol.SubmitReply{SessionID: "x"})
	var r protocol.SubmitReply
	// Rewrite the version by decoding into a map, bumping it and encoding again.
	data := append([]byte{}, bad...)
	data = bumpVersion(t, data)
	if err := protocol.Unmarshal(data, &r); !errors.Is(err, protocol.ErrVersion) {
		t.Fatalf("unknown version decoded without ErrVersion: %v", err)
	}
}

// TestALostAsyncAckExpires: an asynchronous publish whose ack never comes (here a subscriber that
// takes the message and never answers, as when the ack is lost in a leader election) fails after
// the connection's async publish timeout instead of staying pending, so a later wait for every
// pending publish ends.
func TestALostAsyncAckExpires(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, srv.URL(), "t", 5*time.Second, bus.WithAsyncPublishTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.NC.SubscribeSync("blackhole"); err != nil {
		t.Fatal(err)
	}
	f, err := c.JS.PublishAsync("blackhole", []byte("event"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.Err():
		if !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			t.Fatalf("lost ack ended with %v, want the async publish timeout", err)
		}
	case <-ctx.Done():
		t.Fatal("a publish whose ack never came is still pending")
	}
	select {
	case <-c.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("waiting for pending publishes never ends after a lost ack")
	}
}
