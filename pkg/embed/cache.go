package embed

import (
	"context"
	"slices"

	lru "github.com/hashicorp/golang-lru/v2"
)

// DefaultCacheSize is how many vectors Cached keeps unless configured (memory.embed_cache):
// ~1.6 KiB each at 384 dimensions, so ~6.5 MiB.
const DefaultCacheSize = 4096

// Cached is an Embedder that embeds each (text, model) once while it stays among the size most
// recently used: queries repeat (the same task retried, the same guideline re-mined) and one
// MiniLM forward pass costs milliseconds. Misses of one call are embedded in one batch, a text
// repeated within a call once. Vectors are copied in and out, so callers may change them.
type Cached struct {
	Embedder
	lru *lru.Cache[cacheKey, []float32]
}

type cacheKey struct{ model, text string }

// NewCached wraps e with a cache of size vectors (DefaultCacheSize when size is 0); a negative
// size returns e unwrapped.
func NewCached(e Embedder, size int) Embedder {
	if size < 0 {
		return e
	}
	if size == 0 {
		size = DefaultCacheSize
	}
	c, _ := lru.New[cacheKey, []float32](size) // only fails for size <= 0
	return &Cached{Embedder: e, lru: c}
}

// Embed implements Embedder.
func (c *Cached) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	model := c.Embedder.Model()
	out := make([][]float32, len(texts))
	var miss []string
	where := map[string][]int{}
	for i, t := range texts {
		if v, ok := c.lru.Get(cacheKey{model, t}); ok {
			out[i] = slices.Clone(v)
			continue
		}
		if _, seen := where[t]; !seen {
			miss = append(miss, t)
		}
		where[t] = append(where[t], i)
	}
	if len(miss) == 0 {
		return out, nil
	}
	vecs, err := c.Embedder.Embed(ctx, miss)
	if err != nil {
		return nil, err
	}
	for j, t := range miss {
		c.lru.Add(cacheKey{model, t}, slices.Clone(vecs[j]))
		for _, i := range where[t] {
			out[i] = slices.Clone(vecs[j])
		}
	}
	return out, nil
}

// Len is the number of cached vectors.
func (c *Cached) Len() int { return c.lru.Len() }
