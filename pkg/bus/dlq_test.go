package bus_test

import (
	"context"
	"io"
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
	stop, err := bus.StartDLQ(m.Conn, m.Names, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	dlq, err := m.Conn.JS.Stream(ctx, m.Names.Stream(protocol.StreamDLQ))
	if err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := dlq.GetLastMsgForSubject(ctx, m.Names.DLQ(protocol.StreamWork))
		if err == nil {
			if string(msg.Data) != "poison" || msg.Header.Get(bus.HeaderDLQSubject) != m.Names.Work("a") ||
				msg.Header.Get(bus.HeaderDLQConsumer) != "poison-test" {
				t.Fatalf("dead letter = %q %v", msg.Data, msg.Header)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the exhausted message never reached the DLQ")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
