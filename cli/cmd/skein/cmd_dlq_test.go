package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A step that exhausts its deliveries shows up in `skein dlq` with where it came from.
func TestDLQCommandListsDeadLetters(t *testing.T) {
	m := bustest.Start(t)
	if out, err := runCLI(t, m, "dlq"); err != nil || !strings.Contains(out, "no dead letters") {
		t.Fatalf("empty dlq: %v %q", err, out)
	}
	stop, err := bus.StartDLQ(m.Conn, m.Names, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := m.Conn.JS.CreateOrUpdateConsumer(ctx, m.Names.Stream(protocol.StreamWork), jetstream.ConsumerConfig{
		Durable: "poison", FilterSubject: m.Names.Work("a"), AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Conn.JS.Publish(ctx, m.Names.Work("a"), []byte("poison")); err != nil {
		t.Fatal(err)
	}
	for range 2 { // one delivery, then a pull that finds it exhausted
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			_ = msg.Nak()
		}
	}
	for {
		out, err := runCLI(t, m, "dlq")
		if err == nil && strings.Contains(out, m.Names.Work("a")) {
			if !strings.Contains(out, "consumer poison") || !strings.Contains(out, "6 bytes") {
				t.Fatalf("dead letter line lacks its origin: %q", out)
			}
			// --json: the same facts, the reason included (docs/json.md).
			js, err := runCLI(t, m, "dlq", "--json")
			if err != nil {
				t.Fatal(err)
			}
			letters := jsonArray(t, "dlq", []byte(js))
			if len(letters) != 1 {
				t.Fatalf("dlq --json: %s", js)
			}
			l := jsonObject(t, "dlq letter", letters[0], []string{"time", "subject", "stream", "sequence", "consumer", "deliveries", "reason", "bytes"}, nil)
			if string(l["consumer"]) != `"poison"` || string(l["bytes"]) != "6" || len(l["reason"]) <= 2 || !strings.Contains(out, "reason: "+strings.Trim(string(l["reason"]), `"`)) {
				t.Fatalf("dlq --json letter %s; want consumer, size and the reason the text shows:\n%s", letters[0], out)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("dead letter never listed: %v %q", err, out)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
