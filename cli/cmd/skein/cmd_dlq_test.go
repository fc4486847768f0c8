package main

import (
	"context"
	"fmt"
	"log/slog"
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

// A step that exhausts its deliveries shows up in `skein dlq` with where it came from.
func TestDLQCommandListsDeadLetters(t *testing.T) {
	m := bustest.Start(t)
	if out, err := runCLI(t, m, "dlq"); err != nil || !strings.Contains(out, "no dead letters") {
		t.Fatalf("empty dlq: %v %q", err, out)
	}
	stop, err := bus.StartDLQ(m.Conn, m.Names, slog.New(slog.DiscardHandler))
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
	var out string
	poll.Eventually(t, 20*time.Second, "the dead letter to be listed", func() error {
		var err error
		if out, err = runCLI(t, m, "dlq"); err != nil {
			return err
		}
		if !strings.Contains(out, m.Names.Work("a")) {
			return fmt.Errorf("listed %q", out)
		}
		return nil
	})
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
}

// `skein dlq` and `skein usage` read their streams with bus.ReadStream: they leave no consumer
// on the server (an ordered consumer outlived each listing by its inactive threshold), and
// --since starts at the first message stored since then.
func TestListingsLeaveNoConsumerAndHonourSince(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	publish := func(subject string, data []byte, h nats.Header) {
		t.Helper()
		if _, err := m.Conn.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data, Header: h}); err != nil {
			t.Fatal(err)
		}
	}
	letter := func(consumer string) nats.Header {
		return nats.Header{bus.HeaderDLQSubject: {m.Names.Work("a")}, bus.HeaderDLQStream: {"WORK"},
			bus.HeaderDLQConsumer: {consumer}, bus.HeaderDLQSequence: {"1"}, bus.HeaderDLQDeliveries: {"3"}}
	}
	report := func(agent string) []byte {
		ev := protocol.Event{SessionID: "s-" + agent, Type: protocol.EvUsage, Agent: agent, Time: time.Now().UTC(),
			Report: &protocol.UsageReport{Usage: protocol.Usage{InputTokens: 10}}}
		data, err := protocol.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	publish(m.Names.DLQ("WORK"), []byte("old"), letter("old"))
	publish(m.Names.Usage("old"), report("old"), nil)
	// The second pair is stored a second after the cut and each --since starts half a second
	// after it, so a slow command start (up to half a second) cannot move the start past them.
	cut := time.Now()
	poll.True(t, 5*time.Second, "a second past the cut", func() bool { return time.Since(cut) > time.Second })
	publish(m.Names.DLQ("WORK"), []byte("new"), letter("new"))
	publish(m.Names.Usage("new"), report("new"), nil)

	checks := []struct {
		cmd       string
		since     bool
		want, not string
	}{
		{"dlq", false, "consumer old", ""},
		{"dlq", true, "consumer new", "consumer old"},
		{"usage", false, "old", ""},
		{"usage", true, "new", "old"},
	}
	for _, c := range checks {
		args := []string{c.cmd}
		if c.since {
			args = append(args, "--since", (time.Since(cut) - 500*time.Millisecond).String())
		}
		out, err := runCLI(t, m, args...)
		if err != nil || !strings.Contains(out, c.want) || (c.not != "" && strings.Contains(out, c.not)) {
			t.Errorf("skein %s: %v\n%s\nwant %q, not %q", strings.Join(args, " "), err, out, c.want, c.not)
		}
	}
	for _, stream := range []string{protocol.StreamDLQ, protocol.StreamUsage} {
		s, err := m.Conn.JS.Stream(ctx, m.Names.Stream(stream))
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().State.Consumers; n != 0 {
			t.Errorf("stream %s has %d consumers after the listings; want none", stream, n)
		}
	}
}
