// Package embedtest has a deterministic, dependency-free Embedder for unit tests of code that
// needs vectors but not meaning: stores, ingest rules, migration. Texts sharing words get similar
// vectors (a hashed bag of words), identical texts identical ones.
package embedtest

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// Hash is a bag-of-words embedder. The zero value has 64 dimensions and model id "hash-bow-64".
type Hash struct {
	Dimensions int
	ID         string
}

func (h Hash) dim() int {
	if h.Dimensions > 0 {
		return h.Dimensions
	}
	return 64
}

// Embed implements embed.Embedder.
func (h Hash) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = h.vec(t)
	}
	return out, ctx.Err()
}

func (h Hash) vec(text string) []float32 {
	v := make([]float64, h.dim())
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for _, w := range words {
		f := fnv.New64a()
		f.Write([]byte(w))
		x := f.Sum64()
		sign := 1.0
		if x>>63 == 1 {
			sign = -1
		}
		v[x%uint64(len(v))] += sign
	}
	if len(words) == 0 {
		v[0] = 1
	}
	var n float64
	for _, x := range v {
		n += x * x
	}
	n = math.Sqrt(n)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x / n)
	}
	return out
}

// Dim implements embed.Embedder.
func (h Hash) Dim() int { return h.dim() }

// Model implements embed.Embedder.
func (h Hash) Model() string {
	if h.ID != "" {
		return h.ID
	}
	return fmt.Sprintf("hash-bow-%d", h.dim())
}

// Close implements embed.Embedder.
func (h Hash) Close() error { return nil }
