package milvusstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/ingest"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore"
	"github.com/skein-mesh/skein/pkg/memory/storetest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Two memoryd replicas are two Stores with their own Milvus client and NATS connection on one
// collection prefix and one memory bucket.
func replicas(t *testing.T, v env, model string, dim int) (*milvusstore.Store, *milvusstore.Store) {
	pfx := prefix()
	a, err := open(t, v, pfx, model, dim, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := open(t, v, pfx, model, dim, false)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// indexAgrees waits until every replica's Milvus view (List) holds exactly the records (Get):
// same ids, once each, at the records' revisions. want may be in any order: List is by id.
func indexAgrees(t *testing.T, want []memory.Entry, stores ...*milvusstore.Store) {
	t.Helper()
	want = slices.SortedFunc(slices.Values(want), func(x, y memory.Entry) int { return strings.Compare(x.ID, y.ID) })
	poll.Eventually(t, 30*time.Second, "every replica's index to agree with the records", func() error {
		for i, s := range stores {
			got, err := s.List(context.Background(), memory.Filter{Status: memory.StatusAny})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				return fmt.Errorf("replica %d lists %d entries, the records hold %d", i, len(got), len(want))
			}
			for j := range got {
				if got[j].ID != want[j].ID || got[j].Revision != want[j].Revision || got[j].Hits != want[j].Hits ||
					got[j].Tier != want[j].Tier || !slices.Equal(got[j].Sessions, want[j].Sessions) {
					return fmt.Errorf("replica %d indexes %s at revision %d (%d hits, %s), the record is at %d (%d hits, %s)",
						i, got[j].ID, got[j].Revision, got[j].Hits, got[j].Tier, want[j].Revision, want[j].Hits, want[j].Tier)
				}
			}
		}
		return nil
	})
}

// TestReplicasIncrementConcurrently: two replicas add to one counter with compare-and-set until
// each has counted its share; nothing is lost or doubled, and Milvus ends at the last revision.
func TestReplicasIncrementConcurrently(t *testing.T) {
	v := newEnv(t)
	a, b := replicas(t, v, storetest.Model, storetest.Dim)
	ctx := context.Background()
	e, err := a.Put(ctx, storetest.NewEntry("coder", "count me", storetest.Axis(0, 1, 0)))
	if err != nil {
		t.Fatal(err)
	}
	const each = 15
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, s := range []*milvusstore.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < each; {
				cur, err := s.Get(ctx, e.ID)
				if err != nil {
					errs <- err
					return
				}
				cur.Hits++
				cur.Sessions = append(cur.Sessions, fmt.Sprintf("s%d", cur.Hits))
				if _, err := s.Put(ctx, cur); errors.Is(err, memory.ErrConflict) {
					continue
				} else if err != nil {
					errs <- err
					return
				}
				done++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	final, err := b.Get(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if final.Hits != 1+2*each || len(final.Sessions) != 1+2*each {
		t.Fatalf("after %d increments: %d hits, %d sessions, want %d", 2*each, final.Hits, len(final.Sessions), 1+2*each)
	}
	indexAgrees(t, []memory.Entry{final}, a, b)
}

// TestReplicasIngestSameGuidelines: two replicas ingest the same sessions' candidates at the same
// time (a redelivered mining result reaches both), plus sessions of their own. Every guideline
// ends as one entry, counting each distinct session once, promoted once, and both replicas'
// Milvus views equal the records.
func TestReplicasIngestSameGuidelines(t *testing.T) {
	v := newEnv(t)
	const dim = 384
	emb := embedtest.Hash{Dimensions: dim, ID: "hash-replicas"}
	a, b := replicas(t, v, emb.Model(), dim)
	guidelines := []string{
		"quote paths containing spaces before calling grep",
		"retry flaky network downloads with exponential backoff",
		"run gofmt before committing generated code",
		"never parse html using regular expressions",
		"check exit codes of shell pipelines with pipefail",
	}
	cands := make([]protocol.Candidate, len(guidelines))
	for i, g := range guidelines {
		cands[i] = protocol.Candidate{Text: g, Polarity: protocol.PolarityAvoid, Key: fmt.Sprintf("k%d", i), Tools: []string{"shell"}}
	}
	// Both replicas see shared sessions s0..s5; each also has two of its own.
	sessions := map[int][]string{}
	for r := range 2 {
		for i := range 6 {
			sessions[r] = append(sessions[r], fmt.Sprintf("s%d", i))
		}
		sessions[r] = append(sessions[r], fmt.Sprintf("own%d-a", r), fmt.Sprintf("own%d-b", r))
	}
	engines := []*ingest.Engine{
		ingest.New(a, emb, ingest.Options{MaxElapsed: 60 * time.Second}),
		ingest.New(b, emb, ingest.Options{MaxElapsed: 60 * time.Second}),
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for r, eng := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, sid := range sessions[r] {
				_, err := eng.Ingest(context.Background(), protocol.IngestRequest{Agent: "coder", SessionID: sid, Candidates: cands})
				if err != nil {
					errs <- fmt.Errorf("replica %d, session %s: %w", r, sid, err)
				}
				if i == 1 {
					// A session that used the guidelines marks them helpful (both replicas get
					// it): promotion needs a helpful mark besides the sessions.
					fb := protocol.FeedbackRequest{Agent: "coder", SessionID: "used"}
					for _, g := range guidelines {
						fb.Helpful = append(fb.Helpful, memory.EntryID("coder", protocol.PolarityAvoid, g))
					}
					if _, err := eng.Feedback(context.Background(), fb); err != nil {
						errs <- fmt.Errorf("replica %d, feedback: %w", r, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wantSessions := 6 + 2 + 2
	var records []memory.Entry
	for _, g := range guidelines {
		id := memory.EntryID("coder", protocol.PolarityAvoid, g)
		e, err := a.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("guideline %q: %v", g, err)
		}
		if len(e.Sessions) != wantSessions || e.Hits != wantSessions {
			t.Errorf("%q: %d sessions, %d hits; want %d distinct sessions counted once", g, len(e.Sessions), e.Hits, wantSessions)
		}
		if e.Tier != protocol.TierStrategic || e.Status != memory.StatusActive || e.Helpful != 1 {
			t.Errorf("%q: %s/%s, %d helpful; want active strategic, the one helpful mark counted once", g, e.Tier, e.Status, e.Helpful)
		}
		records = append(records, e)
	}
	indexAgrees(t, records, a, b)
}

// TestRepairAfterCrash: a writer that died between its record and its Milvus row leaves the row
// behind (here: records written straight into the bucket); Repair brings Milvus back to the
// records, adding, updating and removing rows.
func TestRepairAfterCrash(t *testing.T) {
	v := newEnv(t)
	pfx := prefix()
	s, err := open(t, v, pfx, storetest.Model, storetest.Dim, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kept, err := s.Put(ctx, storetest.NewEntry("coder", "kept as is", storetest.Axis(0, 1, 0)))
	if err != nil {
		t.Fatal(err)
	}
	stale, err := s.Put(ctx, storetest.NewEntry("coder", "updated without its row", storetest.Axis(1, 2, 0)))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := s.Put(ctx, storetest.NewEntry("coder", "deleted without its row", storetest.Axis(2, 3, 0)))
	if err != nil {
		t.Fatal(err)
	}
	kv := v.opts(t, pfx, storetest.Model, storetest.Dim, false).KV
	key := func(id string) string { return milvusstore.KeyPrefix + pfx + ".e." + id }
	// The crashed writes: only the records changed.
	stale.Hits = 7
	if _, err := kv.Update(ctx, key(stale.ID), milvusstore.EncodeRecord(t, stale), stale.Revision); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, key(gone.ID)); err != nil {
		t.Fatal(err)
	}
	added := storetest.NewEntry("coder", "created without its row", storetest.Axis(3, 4, 0))
	if _, err := kv.Create(ctx, key(added.ID), milvusstore.EncodeRecord(t, added)); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Repair(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (memory.RepairReport{Records: 3, Rows: 3, Missing: 1, Stale: 1, Orphans: 1}); rep != want {
		t.Fatalf("Repair found %+v, want %+v", rep, want)
	}
	var want []memory.Entry
	for _, id := range []string{kept.ID, stale.ID, added.ID} {
		e, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
	}
	indexAgrees(t, want, s)
	if rep, err := s.Repair(ctx); err != nil || rep.Changed() != 0 {
		t.Fatalf("second Repair: %+v, %v; want nothing to do", rep, err)
	}
}
