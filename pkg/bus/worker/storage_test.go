package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/bus/worker"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// workPending is how many steps the WORK stream still holds (a work queue drops a message only
// once it is acked or terminated).
func workPending(t *testing.T, m *bustest.Mesh) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := m.Conn.JS.Stream(ctx, m.Names.Stream(protocol.StreamWork))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// A message whose last delivery fails while the DLQ cannot be written is not lost: it stays in
// its stream, through a stop of the worker too, and reaches the DLQ once the DLQ is back. (The
// server used to stop delivering it after its last delivery, and the worker's nak "so it is not
// lost" left it in the stream for good, in no one's hands.)
func TestAMessageWhoseDeadLetterCannotBeWrittenStaysPending(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dlqName := m.Names.Stream(protocol.StreamDLQ)
	dlqConfig, err := m.Conn.JS.Stream(ctx, dlqName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := dlqConfig.CachedInfo().Config
	if err := m.Conn.JS.DeleteStream(ctx, dlqName); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	failing := func(context.Context, jetstream.Msg) error { calls.Add(1); return errors.New("the model is down") }
	s := spec(t, m, 2)
	wctx, stopWorker := context.WithCancel(context.Background())
	w, err := worker.New(wctx, m.Conn, m.Names, s, worker.Options{NakDelay: 50 * time.Millisecond, MaxNakDelay: 200 * time.Millisecond}, failing)
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { _ = w.Run(wctx); close(stopped) }()
	publish(t, m, step(t, "unlucky"))
	poll.True(t, 20*time.Second, "both deliveries to fail", func() bool { return calls.Load() >= 2 })
	// The worker holds the message and writes its dead letter again: it stays in WORK.
	poll.Quiet(t, time.Second, "the step staying in WORK while the DLQ is missing", func() error {
		if n := workPending(t, m); n != 1 {
			return fmt.Errorf("WORK holds %d messages, want 1", n)
		}
		return nil
	})
	// A stop meanwhile hands it back; the next worker dead-letters it without running it again.
	stopWorker()
	<-stopped
	if n := workPending(t, m); n != 1 {
		t.Fatalf("WORK holds %d messages after the worker stopped, want 1", n)
	}
	run(t, m, s, worker.Options{NakDelay: 50 * time.Millisecond, MaxNakDelay: 200 * time.Millisecond}, failing)
	if _, err := m.Conn.JS.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	got := bustest.DeadLetters(t, m.Conn, m.Names, 1)
	if r := got[0].Header.Get(bus.HeaderDLQReason); !contains(r, "the model is down") && !contains(r, "more than the 2 allowed") {
		t.Errorf("dead letter reason %q", r)
	}
	poll.True(t, 10*time.Second, "the dead-lettered step to leave WORK", func() bool { return workPending(t, m) == 0 })
	if n := calls.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2 (MaxDeliveries): a message past its deliveries is not run again", n)
	}
}

// A handler that fails because JetStream refuses a write for want of room (here a stream's own
// limit under discard-new; a full disk is the same to the worker) keeps its message, without
// using up its deliveries, and succeeds once there is room again.
func TestStorageRefusalsHoldTheMessageWithoutUsingUpDeliveries(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full, err := m.Conn.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "TINY", Subjects: []string{"tiny.>"},
		MaxMsgs: 1, Discard: jetstream.DiscardNew, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Conn.JS.Publish(ctx, "tiny.a", []byte("fills it")); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var refused atomic.Value
	done := make(chan uint64, 1)
	run(t, m, spec(t, m, 2), worker.Options{NakDelay: 50 * time.Millisecond}, func(ctx context.Context, msg jetstream.Msg) error {
		calls.Add(1)
		if _, err := m.Conn.JS.Publish(ctx, "tiny.b", []byte("needs room")); err != nil {
			refused.Store(err)
			return fmt.Errorf("write: %w", err)
		}
		meta, _ := msg.Metadata()
		done <- meta.NumDelivered
		return nil
	})
	publish(t, m, step(t, "patient"))
	poll.True(t, 20*time.Second, "three refused writes", func() bool { return calls.Load() >= 3 })
	if err, _ := refused.Load().(error); !bus.IsStorageFull(err) {
		t.Fatalf("the stream's refusal %v is not recognised as storage full", err)
	}
	if err := full.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-done:
		if n != 1 {
			t.Errorf("the message was delivered %d times; refusals for storage must not use up deliveries", n)
		}
	case <-ctx.Done():
		t.Fatal("the held message did not succeed once the stream had room")
	}
	if info, err := m.Conn.JS.Stream(ctx, m.Names.Stream(protocol.StreamDLQ)); err == nil && info.CachedInfo().State.Msgs != 0 {
		t.Errorf("%d dead letters, want none", info.CachedInfo().State.Msgs)
	}
}
