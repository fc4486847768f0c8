package bus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A publish, a key's operation, a consumer or a request whose subject the server would refuse is
// refused before it is sent, with a too_large error, and the connection keeps serving. Without
// the guard each of these closes the connection for good (the next test shows that).
func TestOverlongSubjectsAreRefusedBeforeTheyCostTheConnection(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	long := strings.Repeat("a", 5000)
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	stream := m.Names.Stream(protocol.StreamTrace)
	ops := map[string]func() error{
		"publish":       func() error { _, err := m.Conn.JS.Publish(ctx, m.Names.Trace(long), []byte("x")); return err },
		"publish msg":   func() error { _, err := m.Conn.JS.PublishMsg(ctx, nats.NewMsg(m.Names.Trace(long))); return err },
		"publish async": func() error { _, err := m.Conn.JS.PublishAsync(m.Names.Trace(long), []byte("x")); return err },
		"kv get":        func() error { _, err := kv.Get(ctx, long); return err },
		"kv put":        func() error { _, err := kv.Put(ctx, long, []byte("x")); return err },
		"kv create":     func() error { _, err := kv.Create(ctx, long, []byte("x")); return err },
		"kv watch":      func() error { _, err := kv.Watch(ctx, long); return err },
		"kv delete":     func() error { return kv.Delete(ctx, long) },
		"ordered consumer": func() error {
			_, err := m.Conn.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{m.Names.Trace(long)}})
			return err
		},
		"consumer": func() error {
			_, err := m.Conn.JS.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{FilterSubject: m.Names.Trace(long)})
			return err
		},
		"request": func() error {
			return bus.Request(ctx, m.Conn.NC, m.Names.Memory(long), &protocol.MemoryHealthRequest{}, &protocol.MemoryHealthReply{}, time.Second)
		},
	}
	for name, op := range ops {
		if err := op(); protocol.CodeOf(err) != protocol.CodeTooLarge {
			t.Errorf("%s with a 5000-byte id: %v, want a too_large refusal", name, err)
		}
	}
	// The same connection still works.
	if _, err := kv.Put(ctx, "s-1", []byte("x")); err != nil {
		t.Fatalf("the connection no longer serves: %v", err)
	}
	if m.Conn.NC.IsClosed() || m.Conn.LostErr() != nil {
		t.Fatalf("connection closed: %v", m.Conn.LostErr())
	}
	// A key of the longest id kind fits.
	if _, err := kv.Get(ctx, strings.Repeat("s", protocol.MaxCallID)); !bus.IsNotFound(err) {
		t.Fatalf("get of a key of %d bytes: %v, want not found", protocol.MaxCallID, err)
	}
}

// A connection the server closes for good (here: a raw publish past the guard, with a subject
// over max_control_line) is reported through Lost, so its role can stop and be restarted
// instead of staying up without a connection. A connection closed by Close is no loss.
func TestAConnectionTheServerClosesIsReportedLost(t *testing.T) {
	m := bustest.Start(t)
	c := m.Connect(t, "victim")
	if err := c.NC.Publish("x."+strings.Repeat("a", 5000), nil); err != nil {
		t.Fatal(err)
	}
	poll.Receive(t, 10*time.Second, "Lost to fire after the server closed the connection", c.Lost())
	if err := c.LostErr(); err == nil || !strings.Contains(err.Error(), "maximum control line") {
		t.Fatalf("LostErr = %v, want the server's reason", err)
	}

	calm := m.Connect(t, "calm")
	calm.Close()
	poll.Quiet(t, 200*time.Millisecond, "a closed connection is not lost", func() error {
		return calm.LostErr()
	})
}
