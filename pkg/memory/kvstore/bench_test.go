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

// BenchmarkPutParallel: ingest throughput with concurrent writers.
func BenchmarkPutParallel(b *testing.B) {
	m := bustest.Start(b)
	storetest.BenchPutParallel(b, openB(b, m), benchDim)
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

// BenchmarkOpen: rebuilding the index from the bucket when a replica starts.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			m := bustest.Start(b)
			s := openB(b, m)
			storetest.Fill(b, s, storetest.RandomEntries(n, benchDim, 1), 16)
			b.ResetTimer()
			for range b.N {
				r := openB(b, m)
				if r.Len() != n {
					b.Fatalf("reopened index holds %d of %d", r.Len(), n)
				}
				r.Close()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
