package toolhost

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A result record whose quick send was not acknowledged is written again the waiting way, unless
// it arrived after all; someone else's newer record is left alone, and the log says so.
func TestAnUnacknowledgedResultRecordIsWrittenAgain(t *testing.T) {
	m := bustest.Start(t)
	ctx := context.Background()
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketToolCalls)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	l := &ledger{kv: kv, js: m.Conn.JS, host: "h", log: slog.New(slog.NewTextHandler(&logs, nil))}
	running := func(id string) uint64 {
		rev, err := kv.Create(ctx, id, []byte("running"))
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	value := func(id string) string {
		e, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value())
	}

	// Lost on the way (no acknowledgement, nothing stored): written now.
	rev := running("lost")
	l.confirm(protocol.ToolRequest{CallID: "lost"}, &record{data: []byte("done"), rev: rev})
	if got := value("lost"); got != "done" {
		t.Errorf("lost record: bucket holds %q, want it written again", got)
	}
	// Stored, its acknowledgement lost: nothing to do, nothing to warn about.
	rev = running("late")
	if _, err := kv.Update(ctx, "late", []byte("done"), rev); err != nil {
		t.Fatal(err)
	}
	l.confirm(protocol.ToolRequest{CallID: "late"}, &record{data: []byte("done"), rev: rev})
	if logs.Len() != 0 {
		t.Errorf("a record that arrived late was reported: %s", logs.String())
	}
	// Another host took the call over: its record stays, and the log says ours was not kept.
	rev = running("taken")
	if _, err := kv.Update(ctx, "taken", []byte("theirs"), rev); err != nil {
		t.Fatal(err)
	}
	l.confirm(protocol.ToolRequest{CallID: "taken"}, &record{data: []byte("done"), rev: rev})
	if got := value("taken"); got != "theirs" || !strings.Contains(logs.String(), "tool call result not recorded") {
		t.Errorf("taken over: bucket holds %q, log %q", got, logs.String())
	}
	// The quick way, acknowledged.
	rev = running("quick")
	r := l.finish(protocol.ToolRequest{CallID: "quick", Tool: "t"}, "hash", rev, protocol.ToolReply{ToolResult: protocol.ToolResult{OK: true}})
	l.confirm(protocol.ToolRequest{CallID: "quick"}, r)
	var rec protocol.ToolCallRecord
	if err := protocol.Unmarshal([]byte(value("quick")), &rec); err != nil || rec.State != protocol.CallDone || rec.Reply == nil || !rec.Reply.OK {
		t.Errorf("quick record: %+v (%v)", rec, err)
	}
}

// A running record's lease is renewed while the call runs, and not after stop; r.rev is then the
// record's revision, which the result record is written against.
func TestARunningCallsLeaseIsRenewedUntilStopped(t *testing.T) {
	m := bustest.Start(t)
	ctx := context.Background()
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketToolCalls)
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger{kv: kv, js: m.Conn.JS, host: "h", log: slog.New(slog.DiscardHandler)}
	req := protocol.ToolRequest{CallID: "long", Tool: "t"}
	const lease = 300 * time.Millisecond
	c := l.claim(ctx, req, "hash", lease, 0)
	if c.err != nil || c.prev != nil {
		t.Fatalf("claim: %v, %+v", c.err, c.prev)
	}
	rev := c.rev
	r := &renewal{rev: rev}
	stop := l.renew(req, "hash", lease, r)
	poll.Eventually(t, 10*time.Second, "the running record's lease to be renewed", func() error {
		e, err := kv.Get(ctx, "long")
		if err != nil {
			return err
		}
		if e.Revision() == rev {
			return fmt.Errorf("still at revision %d", rev)
		}
		return nil
	})
	stop()
	e, err := kv.Get(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if r.rev != e.Revision() {
		t.Errorf("after stop r.rev = %d, the record is at %d", r.rev, e.Revision())
	}
	var rec protocol.ToolCallRecord
	if err := protocol.Unmarshal(e.Value(), &rec); err != nil || rec.State != protocol.CallRunning || rec.Host != "h" {
		t.Errorf("renewed record: %+v (%v)", rec, err)
	}
	poll.Quiet(t, 2*lease, "no renewal after stop", func() error {
		if e2, err := kv.Get(ctx, "long"); err != nil || e2.Revision() != e.Revision() {
			return fmt.Errorf("renewed after stop: revision %d → %v (%v)", e.Revision(), e2, err)
		}
		return nil
	})
}

// countingLog is a logger that counts the lines written, by message.
type countingLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countingLog) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[msg]
}

func (c *countingLog) Enabled(context.Context, slog.Level) bool { return true }
func (c *countingLog) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[r.Message]++
	return nil
}
func (c *countingLog) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *countingLog) WithGroup(string) slog.Handler      { return c }

// A running record whose lease lapsed is not taken over at once: while a cluster's stream elects
// a leader its live host cannot renew it, and at the end of the election the first write would
// win. A repeat that sees the host renew within takeoverConfirm waits for that host's run and
// answers with its result; a repeat that sees the lease stay lapsed runs the call.
func TestALapsedLeaseIsTakenOverOnlyIfItsHostStaysSilent(t *testing.T) {
	m := bustest.Start(t)
	ctx := context.Background()
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketToolCalls)
	if err != nil {
		t.Fatal(err)
	}
	for _, renewed := range []bool{true, false} {
		logs := &countingLog{n: map[string]int{}}
		l := &ledger{kv: kv, js: m.Conn.JS, host: "here", log: slog.New(logs), poll: 20 * time.Millisecond}
		req := protocol.ToolRequest{CallID: "lapsed-" + map[bool]string{true: "renewed", false: "dead"}[renewed], Tool: "t", Args: []byte(`{}`)}
		hash := protocol.ArgsHash(req.Tool, req.Args)
		put := func(rec protocol.ToolCallRecord, rev uint64) uint64 {
			t.Helper()
			rec.CallID, rec.Tool, rec.ArgsHash, rec.Host = req.CallID, req.Tool, hash, "there"
			data, err := protocol.Marshal(&rec)
			if err != nil {
				t.Fatal(err)
			}
			if rev == 0 {
				rev, err = kv.Create(ctx, req.CallID, data)
			} else {
				rev, err = kv.Update(ctx, req.CallID, data, rev)
			}
			if err != nil {
				t.Fatal(err)
			}
			return rev
		}
		rev := put(protocol.ToolCallRecord{State: protocol.CallRunning, LeaseUntil: time.Now().Add(-time.Second)}, 0)

		runs := 0
		replies := make(chan protocol.ToolReply, 1)
		go l.once(ctx, req, time.Minute, func() prepared {
			return prepared{run: func() protocol.ToolReply {
				runs++
				return protocol.ToolReply{Host: "here", ToolResult: protocol.ToolResult{OK: true, Result: []byte(`"ran here"`)}}
			}, close: func() {}}
		}, func(out protocol.ToolReply) { replies <- out })

		const lapsedMsg, takeoverMsg = "lease lapsed; taking the call over unless its host renews it", "taking over a call whose host did not renew its lease"
		poll.True(t, 10*time.Second, "the repeat to see the lapsed lease", func() bool { return logs.count(lapsedMsg) > 0 })
		if renewed {
			// The live host's stream is electing a leader: for a while nobody writes, and the
			// repeat must not take the call over meanwhile.
			poll.Quiet(t, takeoverConfirm/2, "no takeover while the lease may yet be renewed", func() error {
				if n := logs.count(takeoverMsg); n > 0 {
					return fmt.Errorf("taken over")
				}
				return nil
			})
			// The host comes back (its stream has a leader again), renews, and finishes.
			rev = put(protocol.ToolCallRecord{State: protocol.CallRunning, LeaseUntil: time.Now().Add(time.Minute)}, rev)
			done := protocol.ToolReply{Host: "there", ToolResult: protocol.ToolResult{OK: true, Result: []byte(`"ran there"`)}}
			put(protocol.ToolCallRecord{State: protocol.CallDone, Reply: &done}, rev)
		}
		var out protocol.ToolReply
		select {
		case out = <-replies:
		case <-time.After(10 * time.Second):
			t.Fatal("no reply")
		}
		switch {
		case renewed && (runs != 0 || !out.Replayed || string(out.Result) != `"ran there"`):
			t.Fatalf("host renewed its lease: %d runs here, reply %+v; want its result, no run here", runs, out)
		case !renewed && (runs != 1 || out.Replayed || string(out.Result) != `"ran here"`):
			t.Fatalf("host stayed silent: %d runs here, reply %+v; want the call run here once", runs, out)
		}
	}
}
