package embed_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
)

// counting records how many texts reach the model.
type counting struct {
	embedtest.Hash
	texts atomic.Int64
}

func (c *counting) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.texts.Add(int64(len(texts)))
	return c.Hash.Embed(ctx, texts)
}

func TestCachedEmbedsEachTextOnce(t *testing.T) {
	inner := &counting{Hash: embedtest.Hash{Dimensions: 16, ID: "m1"}}
	e := embed.NewCached(inner, 2)
	ctx := context.Background()
	want, _ := inner.Hash.Embed(ctx, []string{"a b", "c d", "e f"})
	got, err := e.Embed(ctx, []string{"a b", "c d", "a b"})
	if err != nil {
		t.Fatal(err)
	}
	if inner.texts.Load() != 2 {
		t.Fatalf("model saw %d texts, want 2 (a repeat within a call is embedded once)", inner.texts.Load())
	}
	if !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) || !slices.Equal(got[2], want[0]) {
		t.Fatal("cached vectors differ from the model's")
	}
	got[0][0] = 42 // callers own what they get
	again, _ := e.Embed(ctx, []string{"a b"})
	if inner.texts.Load() != 2 || !slices.Equal(again[0], want[0]) {
		t.Fatalf("second call: model saw %d texts, vector changed: %v", inner.texts.Load(), !slices.Equal(again[0], want[0]))
	}
	// Bounded: a third text evicts the least recently used ("c d").
	if _, err := e.Embed(ctx, []string{"e f"}); err != nil {
		t.Fatal(err)
	}
	if n := e.(*embed.Cached).Len(); n != 2 {
		t.Fatalf("cache holds %d vectors, bound is 2", n)
	}
	if _, err := e.Embed(ctx, []string{"c d"}); err != nil {
		t.Fatal(err)
	}
	if inner.texts.Load() != 4 {
		t.Fatalf("model saw %d texts, want 4 (the evicted one again)", inner.texts.Load())
	}
	if v, _ := e.Embed(ctx, []string{"e f"}); !slices.Equal(v[0], want[2]) {
		t.Fatal("wrong vector for e f")
	}
}

func TestCachedKeysByModel(t *testing.T) {
	// Two embedders of different models behind caches never share vectors, and one cache
	// keys by the model its embedder reports.
	a := embed.NewCached(&counting{Hash: embedtest.Hash{Dimensions: 16, ID: "m1"}}, 8)
	b := embed.NewCached(&counting{Hash: embedtest.Hash{Dimensions: 32, ID: "m2"}}, 8)
	va, _ := a.Embed(context.Background(), []string{"same text"})
	vb, _ := b.Embed(context.Background(), []string{"same text"})
	if len(va[0]) != 16 || len(vb[0]) != 32 {
		t.Fatalf("dims %d, %d", len(va[0]), len(vb[0]))
	}
	if embed.NewCached(a, -1) != a {
		t.Fatal("a negative size must disable the cache")
	}
}
