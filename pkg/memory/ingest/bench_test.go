package ingest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory/ingest"
	"github.com/skein-mesh/skein/pkg/memory/kvstore/kvtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// BenchmarkIngestKV measures ingest of one candidate (lookup by id, near-duplicate search,
// compare-and-set write) on the KV store over a memory of 1,000 entries, without the embedding
// itself (a hash embedder). "new" adds a distinct guideline per op; "merge" adds a new session
// to an existing one.
func BenchmarkIngestKV(b *testing.B) {
	emb := embedtest.Hash{Dimensions: 384, ID: "bench"}
	st := kvtest.Filled(b, emb.Model(), emb.Dim(), 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
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
