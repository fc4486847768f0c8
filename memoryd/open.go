package memoryd

import (
	"context"
	"errors"
	"fmt"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/kvstore"
)

// openEmbedder builds the configured embedder.
// TODO(store engineer): replace with embed.Open(cfg) once pkg/embed has its factory (ollama, openai).
func openEmbedder(_ context.Context, m config.Memory) (embed.Embedder, error) {
	switch m.Embedder {
	case "", "minilm":
		e, err := minilm.Open(minilm.Options{})
		if err != nil {
			return nil, err
		}
		return e, nil
	}
	return nil, fmt.Errorf("memory.embedder %q: this build has no embedder factory for it yet", m.Embedder)
}

// openStore opens the configured store for emb's model. A store written by another model is
// opened anyway, flagged stale, so `skein memory migrate` can reach it through this service.
func openStore(ctx context.Context, d Deps, emb embed.Embedder) (memory.Store, string, error) {
	switch storeKind(d.Config.Memory) {
	case "kv":
		opt := kvstore.Options{Model: emb.Model(), Dim: emb.Dim()}
		st, err := kvstore.Open(ctx, d.Conn.JS, d.Names, opt)
		if errors.Is(err, memory.ErrModelMismatch) {
			opt.AnyModel = true
			st2, err2 := kvstore.Open(ctx, d.Conn.JS, d.Names, opt)
			if err2 != nil {
				return nil, "", err2
			}
			return st2, err.Error(), nil
		}
		if err != nil {
			return nil, "", err
		}
		return st, "", nil
	default:
		// TODO(store engineer): milvusstore via the memory.Open factory.
		return nil, "", fmt.Errorf("memory.store %q is not available in this build", d.Config.Memory.Store)
	}
}
