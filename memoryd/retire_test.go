package memoryd_test

import (
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestInspectRanksLikeRetrievalAndRetireTakesEntriesOut: two entries with the same text
// similarity are ordered by their feedback exactly as retrieval orders them; a retired entry
// stays listed but leaves search, an evicted one leaves the store.
func TestInspectRanksLikeRetrievalAndRetireTakesEntriesOut(t *testing.T) {
	m := bustest.Start(t)
	c := start(t, m, embedtest.Hash{}, nil)
	ctx := ctxT(t)
	now := time.Now().UTC()
	text := "Check that the CSV file exists before reading it."
	entries := []memory.Entry{
		{ID: "low", Agent: "demo", Text: text, Polarity: protocol.PolarityAvoid, Tier: protocol.TierTactical, Sessions: []string{"s1"}, Harmful: 2, Source: "human", Status: memory.StatusActive, Created: now, Updated: now},
		{ID: "high", Agent: "demo", Text: text, Polarity: protocol.PolarityAvoid, Tier: protocol.TierTactical, Sessions: []string{"s2"}, Helpful: 3, Source: "human", Status: memory.StatusActive, Created: now, Updated: now},
	}
	if rep, err := c.Import(ctx, protocol.MemoryImportRequest{Entries: entries}); err != nil || rep.Imported != 2 {
		t.Fatalf("import: %+v %v", rep, err)
	}
	ins, err := c.Inspect(ctx, protocol.MemoryInspectRequest{Agent: "demo", Query: "read the csv file", TopK: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(ins.Hits) != 2 || ins.Hits[0].Entry.ID != "high" || ins.Hits[1].Entry.ID != "low" {
		t.Fatalf("hits not ordered by feedback: %+v", ins.Hits)
	}
	h := ins.Hits[0]
	if want := retrieve.Rank(h.Similarity, h.Entry); h.Score != want || h.Why == "" {
		t.Fatalf("hit score %v, want retrieval's rank %v (similarity %v), why %q", h.Score, want, h.Similarity, h.Why)
	}

	if rep, err := c.Retire(ctx, protocol.MemoryRetireRequest{ID: "high", Reason: "test", By: "test"}); err != nil || rep.Status != memory.StatusRetired {
		t.Fatalf("retire: %+v %v", rep, err)
	}
	e, err := c.Get(ctx, "high")
	if err != nil || e.Status != memory.StatusRetired {
		t.Fatalf("retired entry: %+v %v", e, err)
	}
	ins, err = c.Inspect(ctx, protocol.MemoryInspectRequest{Agent: "demo", Query: "read the csv file", TopK: 5})
	if err != nil || len(ins.Hits) != 1 || ins.Hits[0].Entry.ID != "low" {
		t.Fatalf("search after retire: %+v %v", ins, err)
	}

	if rep, err := c.Retire(ctx, protocol.MemoryRetireRequest{ID: "low", Evict: true}); err != nil || !rep.Evicted {
		t.Fatalf("evict: %+v %v", rep, err)
	}
	if _, err := c.Get(ctx, "low"); err == nil {
		t.Fatal("evicted entry still in the store")
	}
	if _, err := c.Retire(ctx, protocol.MemoryRetireRequest{ID: "nope"}); err == nil {
		t.Fatal("retiring a missing entry did not fail")
	}
}
