package memory

import (
	"context"
	"fmt"

	"github.com/skein-mesh/skein/pkg/embed"
)

// Reembedder is a Store whose vectors can be replaced by another embedding model's. Every store in
// this repository implements it; open the store with its "any model" option to migrate it.
type Reembedder interface {
	Store
	// Reembed rewrites every entry (any status) with a vector from embed and records model and dim
	// as the store's own. It returns how many entries it rewrote.
	Reembed(ctx context.Context, model string, dim int, embed func(context.Context, []string) ([][]float32, error)) (int, error)
}

// Migrate re-embeds every entry of s with e and makes e's model the store's model; it is what
// `skein memory migrate` runs. Running it again after a failure is safe.
func Migrate(ctx context.Context, s Store, e embed.Embedder) (int, error) {
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
