package ingest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory/ingest"
	"github.com/skein-mesh/skein/pkg/memory/kvstore"
	"github.com/skein-mesh/skein/pkg/memory/storetest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// BenchmarkIngestKV measures ingest of one candidate (lookup by id, near-duplicate search,
// compare-and-set write) on the KV store over a memory of 1,000 entries, without the embedding
// itself (a hash embedder). "new" adds a distinct guideline per op; "merge" adds a new session
// to an existing one.
func BenchmarkIngestKV(b *testing.B) {
	m := bustest.Start(b)
	emb := embedtest.Hash{Dimensions: 384, ID: "bench"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := kvstore.Open(ctx, m.Conn.JS, m.Names, kvstore.Options{Model: emb.Model(), Dim: emb.Dim()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	storetest.Fill(b, st, storetest.RandomEntries(1000, emb.Dim(), 1), 8)
	eng := ingest.New(st, emb, ingest.Options{PromotionSessions: 1 << 30, Capacity: 1 << 30})
	b.Run("new", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			c := protocol.Candidate{Text: fmt.Sprintf("Guideline number %d about tool%d and flag --x%d", i, i%7, i), Polarity: protocol.PolarityAvoid, Key: "k"}
			if _, err := eng.IngestOne(ctx, "agent0", "s", c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("merge", func(b *testing.B) {
		c := protocol.Candidate{Text: "Check the path before csv_read.", Polarity: protocol.PolarityAvoid, Key: "k"}
		i := 0
		for b.Loop() {
			i++
			if _, err := eng.IngestOne(ctx, "agent0", fmt.Sprintf("s%d", i), c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
