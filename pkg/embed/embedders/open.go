// Package embedders opens the embedder a config's memory section names. It is apart from package
// embed (the interface and its cache, which every user of vectors links) because the default
// embedder links ONNX Runtime: only the processes that embed (memoryd, the CLI's embedded mesh)
// import this package.
package embedders

import (
	"context"
	"fmt"
	"os"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/httpembed"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
)

// EnvAPIKey is the bearer token for an OpenAI-compatible embedding server (OPENAI_API_KEY is
// used when it is unset).
const EnvAPIKey = "SKEIN_EMBED_API_KEY"

// Open returns the embedder the memory section configures: minilm (default, in process),
// ollama, or openai (any OpenAI-compatible /v1/embeddings server).
// The embedder is wrapped in a cache of memory.embed_cache vectors (embed.Cached).
func Open(ctx context.Context, m config.Memory) (embed.Embedder, error) {
	e, err := open(ctx, m)
	if err != nil {
		return nil, err
	}
	return embed.NewCached(e, m.EmbedCache), nil
}

func open(ctx context.Context, m config.Memory) (embed.Embedder, error) {
	switch m.Embedder {
	case "", "minilm":
		e, err := minilm.Open(minilm.Options{ModelDir: os.Getenv(minilm.EnvModelDir), LibPath: os.Getenv(minilm.EnvORTLib)})
		if err != nil {
			return nil, err
		}
		return e, nil
	case httpembed.KindOllama, httpembed.KindOpenAI:
		key := os.Getenv(EnvAPIKey)
		if key == "" && m.Embedder == httpembed.KindOpenAI {
			key = os.Getenv("OPENAI_API_KEY")
		}
		e, err := httpembed.New(ctx, httpembed.Options{Kind: m.Embedder, URL: m.EmbedURL, Model: m.EmbedModel, APIKey: key})
		if err != nil {
			return nil, err
		}
		return e, nil
	default:
		return nil, fmt.Errorf("memory.embedder %q: want minilm, ollama or openai", m.Embedder)
	}
}
