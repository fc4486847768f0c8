package memorybench_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory/benchcorpus"
	"github.com/skein-mesh/skein/pkg/memory/kvstore"
	"github.com/skein-mesh/skein/pkg/memory/memorybench"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore/milvustest"
	"github.com/skein-mesh/skein/pkg/memory/storetest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func TestMain(m *testing.M) { os.Exit(milvustest.Main(m)) }

const queries = 200

// corpus returns n corpus vectors and the query vectors, embedding (and caching) what is missing.
func corpus(t *testing.T, n int) (vecs, qs [][]float32, model string) {
	t.Helper()
	e, err := minilm.Open(minilm.Options{})
	if err != nil {
		if devenv.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	defer e.Close()
	ctx := context.Background()
	start := time.Now()
	if qs, err = benchcorpus.Vectors(ctx, e, benchcorpus.QuerySeed, queries, nil); err != nil {
		t.Fatal(err)
	}
	if vecs, err = benchcorpus.Vectors(ctx, e, benchcorpus.CorpusSeed, n, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("corpus of %d sentences ready in %s (read from, or embedded into, the cache in %s)", n, d.Round(time.Second), benchcorpus.Dir())
	}
	return vecs, qs, e.Model()
}

func truth(vecs, qs [][]float32) [][]string {
	out := make([][]string, len(qs))
	for i, q := range qs {
		out[i] = memorybench.Exact(vecs, q, memorybench.K)
	}
	return out
}

func heapMiB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20)
}

// benchKV fills the embedded store, measures it, and records how long a reopen (index rebuilt
// from the bucket) takes.
func benchKV(t *testing.T, vecs, qs [][]float32, tr [][]string, model string) memorybench.Result {
	return benchKVWith(t, "embedded KV, exact scan", kvstore.Options{ANNMin: -1}, vecs, qs, tr, model)
}

func benchKVWith(t *testing.T, name string, kopt kvstore.Options, vecs, qs [][]float32, tr [][]string, model string) memorybench.Result {
	ctx := context.Background()
	m := bustest.Start(t)
	before := heapMiB()
	kopt.Model, kopt.Dim = model, len(vecs[0])
	s, err := kvstore.Open(ctx, m.Conn.JS, m.Names, kopt)
	if err != nil {
		t.Fatal(err)
	}
	es := memorybench.Entries(vecs, model)
	t0 := time.Now()
	storetest.Fill(t, s, es, 16)
	ins := float64(len(es)) / time.Since(t0).Seconds()
	p50, p99, rec, err := memorybench.Measure(ctx, memorybench.StoreSearcher(s), qs, tr)
	if err != nil {
		t.Fatal(err)
	}
	mem := heapMiB() - before
	cells, probe := s.ANNCells(), s.ANNProbe()
	s.Close()
	t1 := time.Now()
	s2, err := kvstore.Open(ctx, m.Conn.JS, m.Names, kopt)
	if err != nil {
		t.Fatal(err)
	}
	reopen := time.Since(t1)
	if s2.Len() != len(es) {
		t.Fatalf("reopened index holds %d of %d entries", s2.Len(), len(es))
	}
	note := fmt.Sprintf("start-up (index rebuilt from the bucket) %.2f s; %s", reopen.Seconds(), index(cells, probe))
	if c2, p2 := s2.ANNCells(), s2.ANNProbe(); c2 != cells {
		// The index a replica builds on start (clustered once, over everything) is not the one
		// the writes grew: measure it too.
		q50, q99, rec2, err := memorybench.Measure(ctx, memorybench.StoreSearcher(s2), qs, tr)
		if err != nil {
			t.Fatal(err)
		}
		note += fmt.Sprintf("; after start-up %s: p50 %.2f ms, p99 %.2f ms, recall %.4f", index(c2, p2), float64(q50)/1e6, float64(q99)/1e6, rec2)
	}
	s2.Close()
	return memorybench.Result{Store: name, N: len(vecs), P50: p50, P99: p99, Recall: rec, InsertPer: ins,
		Memory: fmt.Sprintf("%.0f MiB Go heap (with in-process NATS)", mem), Note: note}
}

// benchMilvus bulk-loads a Milvus store (records in a NATS bucket, rows in Milvus), waits until
// the query nodes serve the built index (Flush), and measures searches: right after the build
// the server still answers from its interim index, whose recall is not HNSW's.
func benchMilvus(t *testing.T, name string, srv *milvustest.Shared, vecs, qs [][]float32, tr [][]string, model, consistency string) memorybench.Result {
	ctx := context.Background()
	m := bustest.Start(t)
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketMemory)
	if err != nil {
		t.Fatal(err)
	}
	pfx := fmt.Sprintf("bench%d_%d", time.Now().UnixNano()%1e9, len(vecs))
	s, err := milvusstore.Open(ctx, milvusstore.Options{Addr: srv.Addr, KV: kv, Prefix: pfx, Model: model, Dim: len(vecs[0]), Consistency: consistency})
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, srv.Log())
	}
	defer s.Close()
	es := memorybench.Entries(vecs, model)
	t0 := time.Now()
	for start := 0; start < len(es); start += 10_000 {
		if err := s.PutBatch(ctx, es[start:min(start+10_000, len(es))]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	ins := float64(len(es)) / time.Since(t0).Seconds()
	t1 := time.Now()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	indexed := time.Since(t1)
	p50, p99, rec, err := memorybench.Measure(ctx, memorybench.StoreSearcher(s), qs, tr)
	if err != nil {
		t.Fatal(err)
	}
	mem := "—"
	if srv.PGID > 0 {
		mem = fmt.Sprintf("%.0f MiB server RSS", memorybench.GroupRSS(srv.PGID))
	}
	return memorybench.Result{Store: name, N: len(vecs), P50: p50, P99: p99, Recall: rec, InsertPer: ins, Memory: mem,
		Note: fmt.Sprintf("HNSW M=16 efC=200 ef=64, %s consistency; flush, index and its load %.1f s", consistency, indexed.Seconds())}
}

// TestMemoryBench prints the side-by-side table (make memory-bench). Sizes and stores come from
// SKEIN_MEMORY_BENCH (e.g. "1000,10000,100000") and SKEIN_MEMORY_BENCH_STORES (default
// "brute,kv,kv-exact,milvus,lite").
func TestMemoryBench(t *testing.T) {
	spec := os.Getenv("SKEIN_MEMORY_BENCH")
	if spec == "" {
		t.Skip("set SKEIN_MEMORY_BENCH=1000,10000,100000 (make memory-bench)")
	}
	stores := os.Getenv("SKEIN_MEMORY_BENCH_STORES")
	if stores == "" {
		stores = "brute,kv,kv-exact,milvus,lite"
	}
	var sizes []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("SKEIN_MEMORY_BENCH: %q is not a size", f)
		}
		sizes = append(sizes, n)
	}
	var results []memorybench.Result
	for _, n := range sizes {
		vecs, qs, model := corpus(t, n)
		tr := truth(vecs, qs)
		for _, st := range strings.Split(stores, ",") {
			var r memorybench.Result
			switch strings.TrimSpace(st) {
			case "brute":
				p50, p99, rec, _ := memorybench.Measure(context.Background(), func(_ context.Context, q []float32) ([]string, error) {
					return memorybench.Exact(vecs, q, memorybench.K), nil
				}, qs, tr)
				r = memorybench.Result{Store: "brute force (Go scan, same run)", N: n, P50: p50, P99: p99, Recall: rec, Memory: fmt.Sprintf("%.0f MiB vectors", float64(n*len(vecs[0])*4)/(1<<20))}
			case "kv":
				r = benchKVWith(t, "embedded KV, defaults", kvstore.Options{}, vecs, qs, tr, model)
			case "kv-exact":
				r = benchKV(t, vecs, qs, tr, model)
			case "kv-ivf":
				np, _ := strconv.ParseFloat(os.Getenv("SKEIN_MEMORY_BENCH_NPROBE"), 64)
				r = benchKVWith(t, "embedded KV, IVF from 1k", kvstore.Options{ANNMin: 1000, NProbe: np}, vecs, qs, tr, model)
			case "milvus":
				r = benchMilvus(t, "Milvus 2.3.5 server", milvustest.ServerFor(t), vecs, qs, tr, model, milvusstore.ConsistencySession)
			case "milvus-strong":
				r = benchMilvus(t, "Milvus 2.3.5 server", milvustest.ServerFor(t), vecs, qs, tr, model, milvusstore.ConsistencyStrong)
			case "milvus-bounded":
				r = benchMilvus(t, "Milvus 2.3.5 server", milvustest.ServerFor(t), vecs, qs, tr, model, milvusstore.ConsistencyBounded)
			case "lite":
				lite := milvustest.Start(t)
				r = benchMilvus(t, "milvus-lite 3.2.2", &milvustest.Shared{Addr: lite.Addr, Lite: true, PGID: lite.PGID()}, vecs, qs, tr, model, milvusstore.ConsistencySession)
				lite.Stop()
			default:
				t.Fatalf("unknown store %q", st)
			}
			t.Logf("%s n=%d: p50 %.2f ms p99 %.2f ms recall %.3f", r.Store, n, float64(r.P50)/1e6, float64(r.P99)/1e6, r.Recall)
			results = append(results, r)
		}
	}
	fmt.Printf("\n%d queries of %d, top-%d, filtered on one agent; real all-MiniLM-L6-v2 vectors of generated sentences\n\n%s\n",
		queries, queries, memorybench.K, memorybench.Table(results))
}

func index(cells, probe int) string {
	if cells == 0 {
		return "exact scan"
	}
	return fmt.Sprintf("IVF, %d cells, %d probed", cells, probe)
}
