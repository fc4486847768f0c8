package memoryd

import (
	"context"
	"errors"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/embedders"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/stores"
)

// openEmbedder builds the configured embedder (minilm in process, or an HTTP embedding server).
func openEmbedder(ctx context.Context, m config.Memory) (embed.Embedder, error) {
	return embedders.Open(ctx, m)
}

// openStore opens the configured store for emb's model. A store written by another model is
// opened anyway, flagged stale, so `skein memory migrate` can reach it through this service.
func openStore(ctx context.Context, d Deps, emb embed.Embedder) (memory.Store, string, error) {
	opt := stores.Options{Model: emb.Model(), Dim: emb.Dim()}
	st, err := stores.Open(ctx, d.Config.Memory, d.Conn.JS, d.Names, opt)
	if errors.Is(err, memory.ErrModelMismatch) {
		opt.AnyModel = true
		st2, err2 := stores.Open(ctx, d.Config.Memory, d.Conn.JS, d.Names, opt)
		if err2 != nil {
			return nil, "", err2
		}
		return st2, err.Error(), nil
	}
	if err != nil {
		return nil, "", err
	}
	return st, "", nil
}
