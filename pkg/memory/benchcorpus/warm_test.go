package benchcorpus_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory/benchcorpus"
)

func TestSentencesDeterministicAndVaried(t *testing.T) {
	a, b := benchcorpus.Sentences(benchcorpus.CorpusSeed, 2000), benchcorpus.Sentences(benchcorpus.CorpusSeed, 2000)
	seen := map[string]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed, different sentences")
		}
		seen[a[i]] = true
	}
	if len(seen) < 1990 {
		t.Fatalf("only %d distinct sentences of 2000", len(seen))
	}
}

// TestWarmCache embeds SKEIN_BENCH_WARM sentences of the corpus into the cache (make memory-bench
// runs it first; skipped otherwise).
func TestWarmCache(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SKEIN_BENCH_WARM"))
	if n <= 0 {
		t.Skip("set SKEIN_BENCH_WARM=<entries> to embed the benchmark corpus")
	}
	e, err := minilm.Open(minilm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	start := time.Now()
	for _, c := range []struct {
		seed uint64
		n    int
	}{{benchcorpus.QuerySeed, 200}, {benchcorpus.CorpusSeed, n}} {
		last := time.Now()
		if _, err := benchcorpus.Vectors(context.Background(), e, c.seed, c.n, func(done int) {
			if time.Since(last) > 30*time.Second {
				last = time.Now()
				t.Logf("seed %d: %d of %d embedded (%s)", c.seed, done, c.n, time.Since(start).Round(time.Second))
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("corpus of %d ready in %s", n, time.Since(start).Round(time.Second))
}
