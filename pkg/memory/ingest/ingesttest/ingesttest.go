// Package ingesttest holds deterministic doubles for memory tests: an embedder whose similarities
// a test controls exactly, and an in-memory Store with compare-and-set and conflict injection.
// They exist for fault injection and for pinning similarity bands; the real stores are tested
// against the shared contract suite elsewhere.
package ingesttest

import (
	"context"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/skein-mesh/skein/pkg/memory"
)

// Dim is the vector dimension of the test embedder.
const Dim = 64

// Embedder maps texts to vectors. A text registered with Set gets exactly that vector; any
// other text gets a hashed bag of words, so texts sharing words are similar.
type Embedder struct {
	mu    sync.Mutex
	fixed map[string][]float32
	// ModelID is reported by Model ("test-bow-64" when empty).
	ModelID string
	// Calls counts Embed calls.
	Calls int
}

// NewEmbedder returns an embedder with no fixed vectors.
func NewEmbedder() *Embedder { return &Embedder{fixed: map[string][]float32{}} }

// Set pins the vector of text (matched after memory.Normalize).
func (e *Embedder) Set(text string, v []float32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fixed[memory.Normalize(text)] = normalize(v)
}

// Embed implements embed.Embedder.
func (e *Embedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Calls++
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if v, ok := e.fixed[memory.Normalize(t)]; ok {
			out[i] = slices.Clone(v)
			continue
		}
		out[i] = BagOfWords(t)
	}
	return out, nil
}

func (e *Embedder) Dim() int { return Dim }

func (e *Embedder) Model() string {
	if e.ModelID == "" {
		return "test-bow-64"
	}
	return e.ModelID
}

func (e *Embedder) Close() error { return nil }

// BagOfWords hashes the words of text into Dim buckets and L2-normalizes the counts.
func BagOfWords(text string) []float32 {
	v := make([]float32, Dim)
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '/' || r == '.')
	}) {
		h := fnv.New32a()
		h.Write([]byte(w))
		v[h.Sum32()%Dim]++
	}
	return normalize(v)
}

// Axis returns a unit vector whose cosine with unit axis i is cos, leaning towards axis j.
// Two vectors Axis(i, a, j) and Axis(i, b, k) with j != k have cosine a*b; with j == k it is
// a*b + sqrt(1-a²)*sqrt(1-b²).
func Axis(i int, cos float64, j int) []float32 {
	v := make([]float32, Dim)
	v[i] = float32(cos)
	v[j] += float32(math.Sqrt(max(0, 1-cos*cos)))
	return normalize(v)
}

// Cosine of two vectors.
func Cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

func normalize(v []float32) []float32 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	if n == 0 {
		return out
	}
	n = math.Sqrt(n)
	for i, x := range v {
		out[i] = float32(float64(x) / n)
	}
	return out
}

// Store is an in-memory memory.Store with compare-and-set semantics.
type Store struct {
	mu      sync.Mutex
	entries map[string]memory.Entry
	rev     uint64
	model   string
	// BeforePut, when set, runs before every Put; an error it returns is returned by Put
	// without writing (use memory.ErrConflict to simulate a concurrent writer).
	BeforePut func(e memory.Entry) error
	// Puts counts successful writes.
	Puts int
}

// NewStore returns an empty store recording model as its embedding model id.
func NewStore(model string) *Store {
	return &Store{entries: map[string]memory.Entry{}, model: model}
}

func (s *Store) Get(_ context.Context, id string) (memory.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
	if !ok {
		return memory.Entry{}, memory.ErrNotFound
	}
	return memory.Clone(e), nil
}

func (s *Store) Put(_ context.Context, e memory.Entry) (memory.Entry, error) {
	s.mu.Lock()
	hook := s.BeforePut
	s.mu.Unlock()
	if hook != nil {
		if err := hook(e); err != nil {
			return memory.Entry{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.entries[e.ID]
	switch {
	case e.Revision == 0 && ok:
		return memory.Entry{}, memory.ErrConflict
	case e.Revision != 0 && (!ok || cur.Revision != e.Revision):
		return memory.Entry{}, memory.ErrConflict
	}
	s.rev++
	e = memory.Clone(e)
	e.Revision = s.rev
	s.entries[e.ID] = e
	s.Puts++
	return memory.Clone(e), nil
}

func (s *Store) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.entries[id]; !ok {
		return memory.ErrNotFound
	}
	delete(s.entries, id)
	return nil
}

func (s *Store) Search(_ context.Context, vec []float32, k int, f memory.Filter) ([]memory.Hit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hits []memory.Hit
	for _, e := range s.entries {
		if !f.Match(&e) {
			continue
		}
		hits = append(hits, memory.Hit{Entry: memory.Clone(e), Score: Cosine(vec, e.Embedding)})
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].Entry.ID < hits[j].Entry.ID
	})
	if k > 0 && len(hits) > k {
		hits = hits[:k]
	}
	return hits, nil
}

func (s *Store) List(_ context.Context, f memory.Filter) ([]memory.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []memory.Entry
	for _, e := range s.entries {
		if f.Match(&e) {
			out = append(out, memory.Clone(e))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (s *Store) Model() string { return s.model }
func (s *Store) Close() error  { return nil }
