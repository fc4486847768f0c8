package memory

import (
	"context"
	"fmt"
)

// Reembedder is a Store whose vectors can be replaced by another embedding model's. Every store in
// this repository implements it; open the store with its "any model" option to migrate it.
type Reembedder interface {
	Store
	// Reembed rewrites every entry (any status) with a vector from embed and records model and dim
	// as the store's own. It returns how many entries it rewrote.
	Reembed(ctx context.Context, model string, dim int, embed func(context.Context, []string) ([][]float32, error)) (int, error)
}

// Embedder is the part of embed.Embedder that migration needs; declared here so this package,
// imported everywhere, does not pull in the embedders and their native runtime.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Dim() int
	Model() string
}

// Migrate re-embeds every entry of s with e and makes e's model the store's model; it is what
// `skein memory migrate` runs (pass any embed.Embedder). Running it again after a failure is
// safe. Stop the writers (memoryd) while it runs.
func Migrate(ctx context.Context, s Store, e Embedder) (int, error) {
	r, ok := s.(Reembedder)
	if !ok {
		return 0, fmt.Errorf("migrate memory: store %T cannot re-embed", s)
	}
	n, err := r.Reembed(ctx, e.Model(), e.Dim(), e.Embed)
	if err != nil {
		return n, fmt.Errorf("migrate memory to %s: %w", e.Model(), err)
	}
	return n, nil
}
