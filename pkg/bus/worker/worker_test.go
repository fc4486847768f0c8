package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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

// spec is the executor's consumer for agent "w" with a short ack wait, so the test sees
// heartbeats matter.
func spec(t *testing.T, m *bustest.Mesh, maxDeliver int) bus.ConsumerSpec {
	t.Helper()
	s, err := bus.Consumers(m.Names, bus.KindExecutor, "w", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.MaxDeliveries = maxDeliver
	return s
}

func run(t *testing.T, m *bustest.Mesh, s bus.ConsumerSpec, opts worker.Options, fn worker.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := worker.New(ctx, m.Conn, m.Names, s, opts, fn)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func publish(t *testing.T, m *bustest.Mesh, data []byte) {
	t.Helper()
	if _, err := m.Conn.JS.Publish(context.Background(), m.Names.Work("w"), data); err != nil {
		t.Fatal(err)
	}
}

func step(t *testing.T, id string) []byte {
	t.Helper()
	b, err := protocol.Marshal(&protocol.Step{SessionID: id, StepID: "s1", Agent: "w"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGarbageAndPermanentFailuresReachTheDLQWithAReason(t *testing.T) {
	m := bustest.Start(t)
	run(t, m, spec(t, m, 5), worker.Options{}, func(ctx context.Context, msg jetstream.Msg) error {
		var st protocol.Step
		if err := worker.Decode(msg, &st); err != nil {
			return err
		}
		return worker.Permanent(errors.New("refused: " + st.SessionID))
	})
	publish(t, m, []byte("not msgpack at all"))
	publish(t, m, step(t, "bad-one"))
	got := bustest.DeadLetters(t, m.Conn, m.Names, 2)
	if len(got) != 2 {
		t.Fatalf("%d dead letters", len(got))
	}
	// The worker handles messages concurrently, so the two may be dead-lettered in either order.
	reasons := got[0].Header.Get(bus.HeaderDLQReason) + " | " + got[1].Header.Get(bus.HeaderDLQReason)
	for _, want := range []string{"undecodable", "refused: bad-one"} {
		found := 0
		for _, g := range got {
			if contains(g.Header.Get(bus.HeaderDLQReason), want) {
				found++
			}
		}
		if found != 1 {
			t.Errorf("%d dead letters say %q, want 1 (all: %s)", found, want, reasons)
		}
	}
	for i := range got {
		if got[i].Header.Get(bus.HeaderDLQSubject) != m.Names.Work("w") || got[i].Header.Get(bus.HeaderDLQStream) != m.Names.Stream(protocol.StreamWork) {
			t.Errorf("dead letter %d origin headers %v", i, got[i].Header)
		}
	}
}

func TestTransientFailuresAreRetriedThenDeadLettered(t *testing.T) {
	m := bustest.Start(t)
	var calls atomic.Int32
	run(t, m, spec(t, m, 3), worker.Options{NakDelay: 50 * time.Millisecond}, func(ctx context.Context, msg jetstream.Msg) error {
		calls.Add(1)
		return errors.New("memoryd is down")
	})
	publish(t, m, step(t, "flaky"))
	got := bustest.DeadLetters(t, m.Conn, m.Names, 1)
	if r := got[0].Header.Get(bus.HeaderDLQReason); !contains(r, "all 3 deliveries") || !contains(r, "memoryd is down") {
		t.Errorf("reason %q", r)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("handled %d times, want 3 (MaxDeliver)", n)
	}
}

// Slow handlers, longer than the ack wait, are heartbeated: no message is handled twice, and no
// more than Workers run at once.
func TestSlowMessagesAreHandledOnceWithinTheBound(t *testing.T) {
	m := bustest.Start(t)
	const workers, n = 2, 6
	var mu sync.Mutex
	seen := map[string]int{}
	var running, peak atomic.Int32
	var wg sync.WaitGroup
	wg.Add(n)
	run(t, m, spec(t, m, 5), worker.Options{Workers: workers}, func(ctx context.Context, msg jetstream.Msg) error {
		cur := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
		}
		var st protocol.Step
		if err := worker.Decode(msg, &st); err != nil {
			return err
		}
		// the duration is the point: the handler outlasts the 1 s ack wait, so only heartbeats
		// keep the message from being redelivered.
		time.Sleep(1500 * time.Millisecond)
		mu.Lock()
		seen[st.SessionID]++
		first := seen[st.SessionID] == 1
		mu.Unlock()
		if first {
			wg.Done()
		}
		return nil
	})
	for i := range n {
		publish(t, m, step(t, string(rune('a'+i))))
	}
	wg.Wait()
	poll.Quiet(t, 1500*time.Millisecond, "no message redelivered past the ack wait", func() error {
		mu.Lock()
		defer mu.Unlock()
		return handledOnce(seen)
	})
	if p := peak.Load(); p > workers || p < 2 {
		t.Errorf("peak concurrency %d, want exactly %d", p, workers)
	}
}

// A burst larger than the pool, on the miner's consumer (which used to pull 16 ahead of its 4
// workers): the worker pulls only what it has free workers for, so no message waits unheartbeated
// in a buffer past the short ack wait, none is handled twice, and the consumer never has more
// messages out than there are workers (give or take acks in flight).
func TestBurstLargerThanThePoolIsHandledOnceEach(t *testing.T) {
	m := bustest.Start(t)
	const workers, n = 2, 8
	s, err := bus.Consumers(m.Names, bus.KindMiner, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	wg.Add(n)
	run(t, m, s, worker.Options{Workers: workers}, func(ctx context.Context, msg jetstream.Msg) error {
		// the duration is the point: 4 rounds of 2, so the last message would wait 2.1 s (twice
		// the ack wait) in a buffer if the worker pulled ahead of its free workers.
		time.Sleep(700 * time.Millisecond)
		mu.Lock()
		seen[msg.Subject()]++
		first := seen[msg.Subject()] == 1
		mu.Unlock()
		if first {
			wg.Done()
		}
		return nil
	})
	for i := range n {
		if _, err := m.Conn.JS.Publish(context.Background(), m.Names.Trace(fmt.Sprintf("s%d", i)), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := m.Conn.JS.Consumer(ctx, s.Stream, s.Config.Durable)
	if err != nil {
		t.Fatal(err)
	}
	allSeen := make(chan struct{})
	go func() { wg.Wait(); close(allSeen) }()
	// Each poll samples how many messages the consumer has out, until all are handled.
	peak := 0
	poll.True(t, 30*time.Second, "the whole burst handled", func() bool {
		if info, err := cons.Info(ctx); err == nil {
			peak = max(peak, info.NumAckPending)
		}
		select {
		case <-allSeen:
			return true
		default:
			return false
		}
	})
	poll.Quiet(t, 1500*time.Millisecond, "no message redelivered past the ack wait", func() error {
		mu.Lock()
		defer mu.Unlock()
		return handledOnce(seen)
	})
	// The server may hand out the next messages before it has processed the acks of the last
	// ones (acks are not waited for), so the count may briefly show up to a pool's worth more;
	// a worker pulling ahead shows the whole burst.
	if peak > 2*workers {
		t.Errorf("%d messages out at once for %d workers: some waited unheartbeated", peak, workers)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// handledOnce says which message, if any, a handler saw more than once.
func handledOnce(seen map[string]int) error {
	for id, c := range seen {
		if c != 1 {
			return fmt.Errorf("%s handled %d times", id, c)
		}
	}
	return nil
}

// A handler that waits for other messages of its own consumer (a step waiting for a child session
// of the same agent) hands its slot back while it waits: a chain three deep completes on a pool of
// one.
func TestWaitingHandsTheSlotBack(t *testing.T) {
	m := bustest.Start(t)
	var mu sync.Mutex
	finished := map[string]chan struct{}{}
	doneCh := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if finished[id] == nil {
			finished[id] = make(chan struct{})
		}
		return finished[id]
	}
	run(t, m, spec(t, m, 5), worker.Options{Workers: 1}, func(ctx context.Context, msg jetstream.Msg) error {
		var st protocol.Step
		if err := worker.Decode(msg, &st); err != nil {
			return err
		}
		// parent → parent-c → parent-c-c: each waits for its child.
		if len(st.SessionID) < len("parent-c-c") {
			child := st.SessionID + "-c"
			worker.Waiting(ctx, func() {
				publish(t, m, step(t, child))
				select {
				case <-doneCh(child):
				case <-ctx.Done():
				}
			})
		}
		close(doneCh(st.SessionID))
		return nil
	})
	publish(t, m, step(t, "parent"))
	poll.Receive(t, 30*time.Second, "the chain to finish (a deadlock means a waiting handler kept its slot)", doneCh("parent"))
}

// Past MaxWaiting a handler keeps its slot while it waits, so what the worker holds stays bounded.
func TestWaitingIsBounded(t *testing.T) {
	m := bustest.Start(t)
	release := make(chan struct{})
	var inHand atomic.Int32
	run(t, m, spec(t, m, 5), worker.Options{Workers: 1, MaxWaiting: 2}, func(ctx context.Context, msg jetstream.Msg) error {
		inHand.Add(1)
		worker.Waiting(ctx, func() {
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		return nil
	})
	for i := range 5 {
		publish(t, m, step(t, "w"+string(rune('a'+i))))
	}
	defer close(release)
	poll.True(t, 5*time.Second, "Workers + MaxWaiting = 3 messages in hand", func() bool { return inHand.Load() >= 3 })
	// Two wait without a slot, the third waits holding the only one: nothing more is pulled.
	poll.Quiet(t, 300*time.Millisecond, "no message pulled past Workers + MaxWaiting", func() error {
		if n := inHand.Load(); n != 3 {
			return fmt.Errorf("%d messages in hand, want Workers + MaxWaiting = 3", n)
		}
		return nil
	})
}

// pullLog counts the worker's failed pulls (its "pull" warnings) and keeps the last error.
type pullLog struct {
	n    atomic.Int32
	last atomic.Value
}

func (p *pullLog) Enabled(context.Context, slog.Level) bool { return true }
func (p *pullLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "pull" {
		p.n.Add(1)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				p.last.Store(a.Value.String())
			}
			return true
		})
	}
	return nil
}
func (p *pullLog) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *pullLog) WithGroup(string) slog.Handler      { return p }

// A pull that keeps failing (here the consumer is gone; in a cluster, no leader during an
// election) is retried after a growing pause, not at once in a loop.
func TestFailingPullsBackOff(t *testing.T) {
	m := bustest.Start(t)
	s := spec(t, m, 5)
	logs := &pullLog{}
	run(t, m, s, worker.Options{Workers: 2, Logger: slog.New(logs)}, func(context.Context, jetstream.Msg) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Conn.JS.DeleteConsumer(ctx, m.Names.Stream(protocol.StreamWork), s.Config.Durable); err != nil {
		t.Fatal(err)
	}
	// The worker's pull in flight ends within fetchWait (5 s); the failures start after it.
	poll.True(t, 8*time.Second, "a failed pull logged after the consumer was deleted", func() bool { return logs.n.Load() > 0 })
	first := logs.n.Load()
	// Pauses of 50 ms doubling to 1 s, each ±50 % at random, fit at most 7 pulls in 1.5 s;
	// without them the worker pulls as fast as the server answers, thousands of times.
	poll.Quiet(t, 1500*time.Millisecond, "at most 15 failed pulls in 1.5 s", func() error {
		if n := logs.n.Load() - first; n > 15 {
			return fmt.Errorf("%d failed pulls (last: %v): the worker retries without pausing", n, logs.last.Load())
		}
		return nil
	})
}
