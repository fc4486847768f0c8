package kvstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/memory/storetest"
)

const benchDim = 384

// BenchmarkPut: ingest throughput, one KV create per entry.
func BenchmarkPut(b *testing.B) {
	m := bustest.Start(b)
	s := openB(b, m)
	storetest.BenchPut(b, s, benchDim)
}

// BenchmarkSearch: retrieval latency at 1k, 10k and 100k entries (random unit vectors).
func BenchmarkSearch(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			m := bustest.Start(b)
			s := openB(b, m)
			storetest.Fill(b, s, storetest.RandomEntries(n, benchDim, 1), 16)
			if err := s.Sync(context.Background()); err != nil {
				b.Fatal(err)
			}
			if s.Len() != n {
				b.Fatalf("index holds %d of %d", s.Len(), n)
			}
			storetest.BenchSearch(b, s, benchDim)
		})
	}
}
