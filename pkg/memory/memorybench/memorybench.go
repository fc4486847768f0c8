// Package memorybench measures the memory stores side by side on real MiniLM vectors of a
// generated corpus (package benchcorpus): search latency percentiles, recall@10 against an exact
// search computed in the same run, insert throughput and memory use. `make memory-bench` runs
// it; the recall test in this package keeps the recorded figures honest.
package memorybench

import (
	"container/heap"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/viterin/vek/vek32"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Agent owns every benchmark entry; searches filter on it, as retrieval does.
const Agent = "bench"

// K is the top-k of every search.
const K = 10

// Entries turns vectors into entries of one agent (ids e000000...).
func Entries(vecs [][]float32, model string) []memory.Entry {
	now := time.Now().UTC()
	out := make([]memory.Entry, len(vecs))
	for i, v := range vecs {
		out[i] = memory.Entry{ID: fmt.Sprintf("e%06d", i), Agent: Agent, Text: fmt.Sprintf("corpus sentence %d", i),
			Polarity: protocol.PolarityAvoid, Tier: protocol.TierTactical, Sessions: []string{"s"}, Hits: 1,
			Model: model, Embedding: v, Source: memory.SourceMiner, Status: memory.StatusActive, Created: now, Updated: now}
	}
	return out
}

type scored struct {
	i int
	s float32
}
type minHeap []scored

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(a, b int) bool { return h[a].s < h[b].s }
func (h minHeap) Swap(a, b int)      { h[a], h[b] = h[b], h[a] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(scored)) }
func (h *minHeap) Pop() any          { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }

// Exact is the brute-force baseline: the ids of the k vectors with the highest dot product with
// q (cosine, the vectors being unit length), best first, by a SIMD scan over every vector.
func Exact(vecs [][]float32, q []float32, k int) []string {
	h := make(minHeap, 0, k+1)
	for i, v := range vecs {
		d := vek32.Dot(v, q)
		if len(h) < k {
			heap.Push(&h, scored{i, d})
		} else if d > h[0].s {
			h[0] = scored{i, d}
			heap.Fix(&h, 0)
		}
	}
	out := make([]string, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = fmt.Sprintf("e%06d", heap.Pop(&h).(scored).i)
	}
	return out
}

// Recall is |got ∩ want| / |want|.
func Recall(got, want []string) float64 {
	if len(want) == 0 {
		return 1
	}
	n := 0
	for _, id := range got {
		if slices.Contains(want, id) {
			n++
		}
	}
	return float64(n) / float64(len(want))
}

// Result is one row of the table.
type Result struct {
	Store     string
	N         int
	P50, P99  time.Duration
	Recall    float64
	InsertPer float64 // entries per second
	Memory    string
	Note      string
}

// Searcher answers one query with ids, best first.
type Searcher func(ctx context.Context, q []float32) ([]string, error)

// Measure runs every query once (after a short warm-up) and fills latency and recall.
func Measure(ctx context.Context, search Searcher, qs [][]float32, truth [][]string) (p50, p99 time.Duration, recall float64, err error) {
	for i := range min(10, len(qs)) {
		if _, err := search(ctx, qs[i]); err != nil {
			return 0, 0, 0, err
		}
	}
	lat := make([]time.Duration, len(qs))
	for i, q := range qs {
		t0 := time.Now()
		ids, err := search(ctx, q)
		lat[i] = time.Since(t0)
		if err != nil {
			return 0, 0, 0, err
		}
		recall += Recall(ids, truth[i])
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], recall / float64(len(qs)), nil
}

// StoreSearcher searches a memory.Store for the benchmark agent.
func StoreSearcher(s memory.Store) Searcher {
	return func(ctx context.Context, q []float32) ([]string, error) {
		hits, err := s.Search(ctx, q, K, memory.Filter{Agent: Agent})
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(hits))
		for i, h := range hits {
			ids[i] = h.Entry.ID
		}
		return ids, nil
	}
}

// GroupRSS is the resident memory of every process in the process group pgid, in MiB.
func GroupRSS(pgid int) float64 {
	ents, _ := os.ReadDir("/proc")
	var kb float64
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				f := strings.Fields(line)
				if len(f) >= 2 {
					v, _ := strconv.ParseFloat(f[1], 64)
					kb += v
				}
			}
		}
	}
	return kb / 1024
}

// Table renders results as a Markdown table.
func Table(rs []Result) string {
	var b strings.Builder
	b.WriteString("| store | entries | p50 ms | p99 ms | recall@10 | insert entries/s | memory | note |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		ins := "—"
		if r.InsertPer > 0 {
			ins = fmt.Sprintf("%.0f", r.InsertPer)
		}
		fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | %.4f | %s | %s | %s |\n", r.Store, r.N,
			float64(r.P50)/1e6, float64(r.P99)/1e6, r.Recall, ins, r.Memory, r.Note)
	}
	return b.String()
}
