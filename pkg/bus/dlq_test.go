package bus_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func TestExhaustedWorkLandsInTheDLQ(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stop, err := bus.StartDLQ(m.Conn, m.Names, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	cons, err := m.Conn.JS.CreateOrUpdateConsumer(ctx, m.Names.Stream(protocol.StreamWork), jetstream.ConsumerConfig{
		Durable: "poison-test", FilterSubject: m.Names.Work("a"), AckPolicy: jetstream.AckExplicitPolicy,
		MaxDeliver: 2, AckWait: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Conn.JS.Publish(ctx, m.Names.Work("a"), []byte("poison")); err != nil {
		t.Fatal(err)
	}
	// Two deliveries, then one more pull: the server notices the exhausted message on that pull.
	for i := 0; i < 3; i++ {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			_ = msg.Nak()
		}
	}
	got := bustest.DeadLetters(t, m.Conn, m.Names, 1)
	if msg := got[0]; msg.Subject != m.Names.DLQ(protocol.StreamWork) || string(msg.Data) != "poison" ||
		msg.Header.Get(bus.HeaderDLQSubject) != m.Names.Work("a") || msg.Header.Get(bus.HeaderDLQConsumer) != "poison-test" {
		t.Fatalf("dead letter on %s = %q %v", msg.Subject, msg.Data, msg.Header)
	}
}
