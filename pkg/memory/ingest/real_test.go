package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/ingest"
	"github.com/skein-mesh/skein/pkg/memory/kvstore"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func openKV(t *testing.T, m *bustest.Mesh, emb embed.Embedder) *kvstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := kvstore.Open(ctx, m.Connect(t, "replica").JS, m.Names, kvstore.Options{Model: emb.Model(), Dim: emb.Dim()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Two memoryd replicas, each with its own KV store handle and index, ingest the same sessions at
// once: compare-and-set on the KV revision keeps exactly one entry with every session once.
func TestReplicasOnKVStoreAgree(t *testing.T) {
	m := bustest.Start(t)
	emb := embedtest.Hash{}
	engines := []*ingest.Engine{
		ingest.New(openKV(t, m, emb), emb, ingest.Options{PromotionSessions: 5}),
		ingest.New(openKV(t, m, emb), emb, ingest.Options{PromotionSessions: 5}),
	}
	c := avoid(`Avoid calling csv_read with {"path":"/data/x.csv"}: it failed with "no such file: /data/x.csv"`, "fail:csv_read", "csv_read")
	var wg sync.WaitGroup
	for i := range 8 {
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := engines[(i+r)%2].IngestOne(context.Background(), agent, fmt.Sprintf("s%d", i), c); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	// Recurrence alone does not promote: the first helpful mark does, on either replica.
	id := memory.EntryID(agent, protocol.PolarityAvoid, c.Text)
	for r := range 2 {
		if _, err := engines[r].Feedback(context.Background(), protocol.FeedbackRequest{Agent: agent, SessionID: "used", Helpful: []string{id}}); err != nil {
			t.Fatal(err)
		}
	}
	st := openKV(t, m, emb)
	es, err := st.List(context.Background(), memory.Filter{Status: memory.StatusAny})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || len(es[0].Sessions) != 8 || es[0].Hits != 8 || es[0].Tier != protocol.TierStrategic || es[0].Helpful != 1 {
		t.Fatalf("want one strategic entry with 8 sessions, got %+v", es)
	}
}

func realEmbedder(t *testing.T) embed.Embedder {
	t.Helper()
	e, err := minilm.Open(minilm.Options{})
	if err != nil {
		if !errors.Is(err, minilm.ErrNotInstalled) {
			t.Fatal(err)
		}
		devtest.Missing(t, fmt.Sprintf("all-MiniLM-L6-v2 (%v)", err))
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// The rules' bands hold with the real model: a reworded lesson merges, opposite advice (which
// MiniLM scores 0.97) does not, and failures stay apart from patterns.
func TestRulesWithMiniLMOnKVStore(t *testing.T) {
	emb := realEmbedder(t)
	m := bustest.Start(t)
	st := openKV(t, m, emb)
	eng := ingest.New(st, emb, ingest.Options{})
	ctx := context.Background()
	do := func(s string, c protocol.Candidate) protocol.IngestAction {
		a, err := eng.IngestOne(ctx, agent, s, c)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	first := do("s1", avoid("Check that the CSV file exists before calling csv_read.", "k", "csv_read"))
	if a := do("s2", avoid("Verify the csv file path exists before using csv_read.", "k", "csv_read")); a.Action != ingest.ActMerged || a.EntryID != first.EntryID {
		t.Fatalf("rewording not merged: %+v", a)
	}
	never := do("s3", avoid("Never pass --header to csv_read.", "h", "csv_read"))
	if a := do("s4", avoid("Always pass --header to csv_read.", "h", "csv_read")); a.Action != ingest.ActAdded || a.EntryID == never.EntryID {
		t.Fatalf("opposite advice merged: %+v", a)
	}
	if a := do("s5", pattern("Check that the CSV file exists before calling csv_read.", "p", "csv_read")); a.Action != ingest.ActAdded {
		t.Fatalf("pattern merged into failure: %+v", a)
	}
	// Third distinct session, after a helpful mark: promoted in place.
	if _, err := eng.Feedback(ctx, protocol.FeedbackRequest{Agent: agent, SessionID: "s5", Helpful: []string{first.EntryID}}); err != nil {
		t.Fatal(err)
	}
	if a := do("s6", avoid("Check the CSV file exists before you call csv_read.", "k", "csv_read")); a.Action != ingest.ActPromoted || a.EntryID != first.EntryID {
		t.Fatalf("promotion: %+v", a)
	}
}
