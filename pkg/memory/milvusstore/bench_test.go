package milvusstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/memory/milvusstore"
	"github.com/skein-mesh/skein/pkg/memory/storetest"
)

const benchDim = 384

func openB(b *testing.B, v env) *milvusstore.Store {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := milvusstore.Open(ctx, v.opts(b, prefix(), "bench", benchDim, false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkPut: ingest throughput through Put (read, compare, upsert per entry).
func BenchmarkPut(b *testing.B) {
	v := newEnv(b)
	storetest.BenchPut(b, openB(b, v), benchDim)
}

// BenchmarkPutBatch: bulk ingest (import), 1000 entries per upsert.
func BenchmarkPutBatch(b *testing.B) {
	v := newEnv(b)
	s := openB(b, v)
	es := storetest.RandomEntries(b.N, benchDim, uint64(time.Now().UnixNano()))
	b.ResetTimer()
	for start := 0; start < len(es); start += 1000 {
		if err := s.PutBatch(context.Background(), es[start:min(start+1000, len(es))]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkSearch: retrieval latency at 1k, 10k and 100k entries (random unit vectors, loaded
// in bulk).
func BenchmarkSearch(b *testing.B) {
	v := newEnv(b)
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			s := openB(b, v)
			es := storetest.RandomEntries(n, benchDim, 1)
			for start := 0; start < n; start += 1000 {
				if err := s.PutBatch(context.Background(), es[start:min(start+1000, n)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			storetest.BenchSearch(b, s, benchDim)
		})
	}
}
