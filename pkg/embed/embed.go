// Package embed turns text into vectors for memory search.
package embed

import "context"

// Embedder maps texts to L2-normalized vectors of a fixed dimension.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Dim is the vector dimension.
	Dim() int
	// Model is a stable id of the model and its pooling, recorded by stores.
	Model() string
	Close() error
}
