package toolhost

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

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
