package kvstore_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/kvstore"
	"github.com/skein-mesh/skein/pkg/memory/storetest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestIVFStaysCorrectUnderChurn: with the inverted-file index on (from 64 entries), searches
// after creates, vector updates and deletes return only live entries that pass the filter,
// with their current cosine, find an entry from its own vector, and fall back to an exact scan
// for a filter whose few matches lie outside the probed cells. A replica that opens the bucket
// afterwards (index rebuilt from the watch) answers the same.
func TestIVFStaysCorrectUnderChurn(t *testing.T) {
	m := bustest.Start(t)
	ctx := context.Background()
	const dim = 32
	opt := kvstore.Options{Model: "bench", Dim: dim, ANNMin: 64, NProbe: 0.05}
	s, err := kvstore.Open(ctx, m.Conn.JS, m.Names, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	es := storetest.RandomEntries(3000, dim, 11)
	for i := range es {
		es[i].Model = "bench"
	}
	storetest.Fill(t, s, es, 8)
	rng := rand.New(rand.NewPCG(3, 4))
	live := map[string]memory.Entry{}
	for _, e := range es {
		live[e.ID] = e
	}
	for i, e := range es {
		switch {
		case i%6 == 0:
			if err := s.Delete(ctx, e.ID); err != nil {
				t.Fatal(err)
			}
			delete(live, e.ID)
		case i%6 == 1:
			cur, err := s.Get(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			v := make([]float32, dim)
			for j := range v {
				v[j] = float32(rng.NormFloat64())
			}
			cur.Embedding = storetest.Unit(v)
			got, err := s.Put(ctx, cur)
			if err != nil {
				t.Fatal(err)
			}
			live[e.ID] = got
		}
	}
	check := func(t *testing.T, s *kvstore.Store) {
		if c := s.ANNCells(); c < 16 {
			t.Fatalf("inverted-file index has %d cells; the test needs it on", c)
		}
		for _, e := range live {
			if rng.IntN(20) != 0 {
				continue
			}
			f := memory.Filter{Agent: e.Agent, Status: memory.StatusAny}
			hits, err := s.Search(ctx, e.Embedding, 10, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(hits) == 0 || hits[0].Entry.ID != e.ID {
				t.Fatalf("searching with %s's own vector did not find it first: %v", e.ID, hits)
			}
			for _, h := range hits {
				cur, ok := live[h.Entry.ID]
				if !ok {
					t.Fatalf("hit %s was deleted", h.Entry.ID)
				}
				if h.Entry.Agent != e.Agent {
					t.Fatalf("hit %s of agent %s for a search of %s", h.Entry.ID, h.Entry.Agent, e.Agent)
				}
				var c float64
				for j := range cur.Embedding {
					c += float64(cur.Embedding[j]) * float64(e.Embedding[j])
				}
				if math.Abs(c-h.Score) > 1e-3 {
					t.Fatalf("hit %s scored %f, its current cosine is %f", h.Entry.ID, h.Score, c)
				}
			}
		}
		// A selective filter: every strategic pattern of one agent, more than k of them is
		// not possible here, so all of them must come back whatever cells they are in.
		f := memory.Filter{Agent: "agent1", Tier: protocol.TierStrategic, Polarity: protocol.PolarityPattern}
		var want []string
		for _, e := range live {
			if f.Match(&e) {
				want = append(want, e.ID)
			}
		}
		hits, err := s.Search(ctx, es[0].Embedding, len(want)+5, f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hits {
			got = append(got, h.Entry.ID)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("selective filter: %d hits, want all %d matches", len(got), len(want))
		}
	}
	t.Run("writer", func(t *testing.T) { check(t, s) })
	t.Run("reopened", func(t *testing.T) {
		s2, err := kvstore.Open(ctx, m.Conn.JS, m.Names, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if s2.Len() != len(live) {
			t.Fatalf("reopened index holds %d entries, want %d", s2.Len(), len(live))
		}
		check(t, s2)
	})
}
