package delta_test

import (
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/delta"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

type got struct {
	mu sync.Mutex
	ds []protocol.Delta
	at []time.Time
}

func (g *got) add(d protocol.Delta) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ds, g.at = append(g.ds, d), append(g.at, time.Now())
}

func (g *got) all() []protocol.Delta {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]protocol.Delta(nil), g.ds...)
}

func (g *got) done() bool {
	ds := g.all()
	return len(ds) > 0 && ds[len(ds)-1].Done
}

// Pieces added quickly go out together once the flush interval passes, in order; Close sends
// the rest marked done.
func TestTurnBatchesAndFollowReads(t *testing.T) {
	m := bustest.Start(t)
	pub, sub := m.Connect(t, "executor"), m.Connect(t, "reader")
	names := protocol.NewNames("")
	var g got
	s, err := delta.Follow(sub.NC, names, "s-1", g.add)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	if err := sub.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	turn := delta.Start(pub.NC, names, "s-1", "step-1", 2, delta.Options{Flush: 40 * time.Millisecond})
	var want strings.Builder
	for i := 0; i < 60; i++ {
		piece := "word" + string(rune('a'+i%26)) + " "
		want.WriteString(piece)
		turn.Text(piece)
	}
	poll.True(t, 5*time.Second, "the batch is flushed without Close", func() bool { return len(g.all()) > 0 })
	turn.Text("end.")
	if err := turn.Close(); err != nil {
		t.Fatal(err)
	}
	want.WriteString("end.")
	poll.True(t, 5*time.Second, "the done delta arrives", g.done)
	ds := g.all()
	if len(ds) != 2 || ds[0].Text != strings.TrimSuffix(want.String(), "end.") || ds[0].Done || ds[1].Text != "end." {
		t.Fatalf("deltas %+v: want the 60 pieces in one batch, then the rest marked done", ds)
	}
	var shown delta.Shown
	var last delta.TurnText
	for i, d := range ds {
		if d.SessionID != "s-1" || d.StepID != "step-1" || d.Turn != 2 || d.Seq != i+1 {
			t.Fatalf("delta %d: %+v", i, d)
		}
		last = shown.Add(d)
	}
	if last.Text != want.String() || last.Gap || !last.Done {
		t.Fatalf("assembled %+v, want %q", last, want.String())
	}
}

// A batch never carries more than MaxBytes, nor splits a character; a restart voids the text;
// a turn that streamed nothing sends nothing.
func TestTurnBoundsRestartsAndStaysQuiet(t *testing.T) {
	m := bustest.Start(t)
	pub, sub := m.Connect(t, "executor"), m.Connect(t, "reader")
	names := protocol.NewNames("")
	var g got
	s, err := delta.Follow(sub.NC, names, "s-2", g.add)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	if err := sub.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	quiet := delta.Start(pub.NC, names, "s-2", "step-1", 1, delta.Options{})
	if err := quiet.Close(); err != nil {
		t.Fatal(err)
	}
	turn := delta.Start(pub.NC, names, "s-2", "step-1", 2, delta.Options{MaxBytes: 10, Flush: time.Hour})
	turn.Text("first try, to be voided")
	turn.Restart()
	long := strings.Repeat("é", 25) // 50 bytes of two-byte characters
	turn.Text(long)
	if err := turn.Close(); err != nil {
		t.Fatal(err)
	}
	poll.True(t, 5*time.Second, "the done delta arrives", g.done)
	var shown delta.Shown
	var last delta.TurnText
	restarts := 0
	for _, d := range g.all() {
		if d.Turn != 2 {
			t.Fatalf("a delta of the quiet turn: %+v", d)
		}
		if len(d.Text) > 10 || !utf8.ValidString(d.Text) {
			t.Fatalf("batch %q: over MaxBytes or a split character", d.Text)
		}
		if d.Restart {
			restarts++
		}
		last = shown.Add(d)
	}
	if last.Text != long || last.Gap || restarts != 1 {
		t.Fatalf("assembled %+v with %d restarts", last, restarts)
	}
}

// A reader that missed a piece knows it.
func TestShownNoticesAGap(t *testing.T) {
	var s delta.Shown
	s.Add(protocol.Delta{StepID: "a", Turn: 1, Seq: 1, Text: "one "})
	if got := s.Add(protocol.Delta{StepID: "a", Turn: 1, Seq: 3, Text: "three", Done: true}); !got.Gap || got.Text != "one three" {
		t.Fatalf("%+v", got)
	}
	if got := s.Add(protocol.Delta{StepID: "a", Turn: 2, Seq: 1, Text: "fresh"}); got.Gap || got.Text != "fresh" {
		t.Fatalf("another turn: %+v", got)
	}
}
