package toolhost

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
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
	rev, prev, err := l.claim(ctx, req, "hash", lease)
	if err != nil || prev != nil {
		t.Fatalf("claim: %v, %+v", err, prev)
	}
	r := &renewal{rev: rev}
	stop := l.renew(req, "hash", lease, r)
	time.Sleep(4 * lease)
	stop()
	e, err := kv.Get(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() == rev {
		t.Fatalf("the record was not renewed in %s with a lease of %s", 4*lease, lease)
	}
	if r.rev != e.Revision() {
		t.Errorf("after stop r.rev = %d, the record is at %d", r.rev, e.Revision())
	}
	var rec protocol.ToolCallRecord
	if err := protocol.Unmarshal(e.Value(), &rec); err != nil || rec.State != protocol.CallRunning || rec.Host != "h" {
		t.Errorf("renewed record: %+v (%v)", rec, err)
	}
	time.Sleep(2 * lease)
	if e2, err := kv.Get(ctx, "long"); err != nil || e2.Revision() != e.Revision() {
		t.Errorf("renewed after stop: revision %d → %v (%v)", e.Revision(), e2, err)
	}
}
