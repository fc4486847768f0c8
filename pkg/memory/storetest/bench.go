package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// BenchAgents is how many agents random entries spread over; searches filter on one of them.
const BenchAgents = 4

// RandomEntries makes n entries with random unit vectors of dim, spread over agents, tiers,
// polarities and a few tools, ids distinct per seed.
func RandomEntries(n, dim int, seed uint64) []memory.Entry {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]memory.Entry, n)
	now := time.Now().UTC()
	tools := []string{"git", "go_test", "curl", "make", "python"}
	for i := range out {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(rng.NormFloat64())
		}
		tier := protocol.TierTactical
		if i%10 == 0 {
			tier = protocol.TierStrategic
		}
		pol := protocol.PolarityAvoid
		if i%3 == 0 {
			pol = protocol.PolarityPattern
		}
		text := fmt.Sprintf("bench guideline %d/%d", seed, i)
		agent := fmt.Sprintf("agent%d", i%BenchAgents)
		out[i] = memory.Entry{
			ID: memory.EntryID(agent, pol, text), Agent: agent, Text: text, Polarity: pol, Tier: tier,
			Tools: []string{tools[i%len(tools)]}, Sessions: []string{"s1"}, Hits: 1, Embedding: Unit(v),
			Source: memory.SourceMiner, Status: memory.StatusActive, Created: now, Updated: now,
		}
	}
	return out
}

// Fill writes entries with Put from a few goroutines.
func Fill(tb testing.TB, s memory.Store, es []memory.Entry, workers int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(es); i += workers {
				if _, err := s.Put(ctx, es[i]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatalf("fill: %v", err)
	}
}

// BenchPut measures sequential creates (one compare-and-set write each).
func BenchPut(b *testing.B, s memory.Store, dim int) {
	es := RandomEntries(b.N, dim, uint64(time.Now().UnixNano()))
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Put(ctx, es[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchPutParallel measures creates from GOMAXPROCS*4 concurrent writers (several memoryd
// handlers ingesting at once).
func BenchPutParallel(b *testing.B, s memory.Store, dim int) {
	es := RandomEntries(b.N, dim, uint64(time.Now().UnixNano()))
	var next atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := s.Put(ctx, es[next.Add(1)-1]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchSearch measures top-10 searches filtered on agent (the retrieval shape memoryd uses) and
// reports latency percentiles in milliseconds.
func BenchSearch(b *testing.B, s memory.Store, dim int) {
	ctx := context.Background()
	qs := RandomEntries(256, dim, 99)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		q := qs[i%len(qs)]
		t0 := time.Now()
		hits, err := s.Search(ctx, q.Embedding, 10, memory.Filter{Agent: q.Agent})
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		if len(hits) == 0 {
			b.Fatal("no hits")
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / 1e6
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
