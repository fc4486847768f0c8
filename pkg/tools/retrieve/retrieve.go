// Package retrieve picks the tools a step is offered: the top_k of the agent's catalogue that
// best fit the step's task, scored by a hybrid of sentence embeddings (the embedder memoryd
// uses) and BM25 over each tool's name, description and parameter names. Embeddings of tools
// are cached by the content of their manifest, so a catalogue is embedded once per process.
// Ranking is deterministic: equal inputs give the same set in the same order.
package retrieve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Weights of the two scores in the hybrid, each normalized to [0, 1] over the catalogue.
// On the committed tool-catalogue benchmark (executor/testdata/catalog) recall at top_k 6 is
// the same for semantic weights 0.3 to 0.7 and falls at 0.8; 0.6 sits in the middle.
const (
	WeightSemantic = 0.6
	WeightLexical  = 0.4
)

// DefaultCacheSize bounds the tool-embedding cache (entries); past it the cache starts over.
const DefaultCacheSize = 10_000

// EmbedFunc returns one L2-normalized vector per text and the id of the model that made them.
type EmbedFunc func(ctx context.Context, texts []string) ([][]float32, string, error)

// Options of one ranking.
type Options struct {
	// TopK is how many tools are offered besides Always (<= 0: all of them).
	TopK int
	// Always names tools offered whatever their score (when they are in the catalogue).
	Always []string
	// Boost adds to a tool's score: learned patterns ("for tasks like X, use Y") name the
	// tools that worked before on similar tasks.
	Boost map[string]float64
}

// Scored is one tool's score and its parts.
type Scored struct {
	Name     string
	Score    float64
	Semantic float64 // normalized cosine similarity (0 in lexical mode)
	Lexical  float64 // normalized BM25
	Boost    float64
}

// Result is a ranking.
type Result struct {
	// Offered are the tools to offer: Always first, then the best TopK, best first.
	Offered []string
	// Ranked is every tool of the catalogue, best first.
	Ranked []Scored
	// Mode is "hybrid", or "lexical" when the embedder failed (Err says why).
	Mode string
	Err  error
}

// Ranker ranks tool catalogues. It is safe for concurrent use.
type Ranker struct {
	embed EmbedFunc
	size  int

	mu    sync.Mutex
	model string
	cache map[string][]float32
}

// New returns a ranker that embeds with embed (nil: lexical only) and caches at most cacheSize
// tool vectors (<= 0: DefaultCacheSize).
func New(embed EmbedFunc, cacheSize int) *Ranker {
	if cacheSize <= 0 {
		cacheSize = DefaultCacheSize
	}
	return &Ranker{embed: embed, size: cacheSize, cache: map[string][]float32{}}
}

// Document is the text a tool is matched on: its name (words split), description and the names
// of its parameters.
func Document(s protocol.ToolSpec) string {
	var b strings.Builder
	b.WriteString(strings.NewReplacer("_", " ", "-", " ").Replace(s.Name))
	b.WriteString(": ")
	b.WriteString(strings.TrimSpace(s.Description))
	if params := paramNames(s.InputSchema); len(params) > 0 {
		b.WriteString(" Parameters: ")
		b.WriteString(strings.Join(params, ", "))
		b.WriteString(".")
	}
	if s.Agent != "" {
		b.WriteString(" (an agent that takes a task)")
	}
	return b.String()
}

// Key is a tool's cache key: the hash of everything retrieval reads from its manifest.
func Key(s protocol.ToolSpec) string {
	h := sha256.New()
	for _, p := range []string{s.Name, s.Description, string(s.InputSchema), s.Agent} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// paramNames are the top-level property names of an object schema, sorted.
func paramNames(schema json.RawMessage) []string {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	out := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Rank scores every tool of specs against query. It never fails: when the embedder does, it
// ranks by BM25 alone and says so in Result.Mode and Result.Err.
func (r *Ranker) Rank(ctx context.Context, query string, specs []protocol.ToolSpec, o Options) Result {
	docs := make([][]string, len(specs))
	for i, s := range specs {
		docs[i] = terms(Document(s))
	}
	lex := normalizeMax(bm25(terms(query), docs))
	res := Result{Mode: "hybrid"}
	var sem []float64
	if r.embed == nil {
		res.Mode, res.Err = "lexical", errors.New("no embedder configured")
	} else if s, err := r.semantic(ctx, query, specs); err != nil {
		res.Mode, res.Err = "lexical", err
	} else {
		sem = normalizeMinMax(s)
	}
	res.Ranked = make([]Scored, len(specs))
	for i, s := range specs {
		sc := Scored{Name: s.Name, Lexical: lex[i], Boost: o.Boost[s.Name]}
		if sem != nil {
			sc.Semantic = sem[i]
			sc.Score = WeightSemantic*sc.Semantic + WeightLexical*sc.Lexical
		} else {
			sc.Score = sc.Lexical
		}
		sc.Score += sc.Boost
		res.Ranked[i] = sc
	}
	// Ties break by name, so equal inputs always give the same set.
	sort.SliceStable(res.Ranked, func(i, j int) bool {
		a, b := res.Ranked[i], res.Ranked[j]
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		return a.Name < b.Name
	})
	for _, s := range specs {
		if slices.Contains(o.Always, s.Name) && !slices.Contains(res.Offered, s.Name) {
			res.Offered = append(res.Offered, s.Name)
		}
	}
	sort.Strings(res.Offered)
	picked := 0
	for _, sc := range res.Ranked {
		if o.TopK > 0 && picked >= o.TopK {
			break
		}
		if slices.Contains(res.Offered, sc.Name) {
			continue
		}
		res.Offered = append(res.Offered, sc.Name)
		picked++
	}
	return res
}

// semantic returns the cosine similarity of every tool with the query, embedding only the
// tools not in the cache (and the query) in one request.
func (r *Ranker) semantic(ctx context.Context, query string, specs []protocol.ToolSpec) ([]float64, error) {
	keys := make([]string, len(specs))
	texts := []string{query}
	var missing []int
	r.mu.Lock()
	for i, s := range specs {
		keys[i] = Key(s)
		if _, ok := r.cache[keys[i]]; !ok {
			missing = append(missing, i)
			texts = append(texts, Document(s))
		}
	}
	r.mu.Unlock()
	vecs, model, err := r.embed(ctx, texts)
	if err != nil {
		return nil, err
	}
	if len(vecs) != len(texts) {
		return nil, fmt.Errorf("embedder returned %d vectors for %d texts", len(vecs), len(texts))
	}
	r.mu.Lock()
	if model != r.model {
		// Vectors of another model are not comparable: start over.
		r.model, r.cache = model, map[string][]float32{}
		if len(missing) != len(specs) {
			r.mu.Unlock()
			return r.semantic(ctx, query, specs)
		}
	}
	defer r.mu.Unlock()
	if len(r.cache)+len(missing) > r.size {
		r.cache = map[string][]float32{}
	}
	tool := make([][]float32, len(specs))
	for i := range specs {
		tool[i] = r.cache[keys[i]]
	}
	for j, i := range missing {
		tool[i] = vecs[j+1]
		if len(r.cache) < r.size {
			r.cache[keys[i]] = vecs[j+1]
		}
	}
	q := vecs[0]
	out := make([]float64, len(specs))
	for i, v := range tool {
		if len(v) != len(q) {
			return nil, fmt.Errorf("embedder returned vectors of %d and %d dimensions", len(q), len(v))
		}
		d := 0.0
		for k := range q {
			d += float64(q[k]) * float64(v[k])
		}
		out[i] = d
	}
	return out, nil
}

// Cached is how many tool vectors the cache holds.
func (r *Ranker) Cached() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cache)
}

func normalizeMax(xs []float64) []float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	out := make([]float64, len(xs))
	if m > 0 {
		for i, x := range xs {
			out[i] = x / m
		}
	}
	return out
}

func normalizeMinMax(xs []float64) []float64 {
	out := make([]float64, len(xs))
	if len(xs) == 0 {
		return out
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	if hi > lo {
		for i, x := range xs {
			out[i] = (x - lo) / (hi - lo)
		}
	}
	return out
}

// Search ranks specs for a free-text request (the find_tools meta-tool) and returns the best
// limit names whose score is above zero, skipping those in exclude.
func (r *Ranker) Search(ctx context.Context, query string, specs []protocol.ToolSpec, exclude []string, limit int) ([]string, Result) {
	res := r.Rank(ctx, query, specs, Options{})
	var out []string
	for _, sc := range res.Ranked {
		if len(out) >= limit {
			break
		}
		if sc.Score <= 0 || slices.Contains(exclude, sc.Name) {
			continue
		}
		out = append(out, sc.Name)
	}
	return out, res
}

// Embedder is the part of embed.Embedder a ranker needs, for an embedder in the same process.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Model() string
}

// FromEmbedder adapts an in-process embedder.
func FromEmbedder(e Embedder) EmbedFunc {
	return func(ctx context.Context, texts []string) ([][]float32, string, error) {
		v, err := e.Embed(ctx, texts)
		return v, e.Model(), err
	}
}
