// Package httpembed embeds through an embedding server: ollama's /api/embed or any
// OpenAI-compatible /v1/embeddings endpoint (OpenAI, vLLM, llama.cpp, LM Studio, ollama's own
// OpenAI route). Vectors are L2-normalized here, whatever the server returns.
package httpembed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Kinds of server.
const (
	KindOllama = "ollama"
	KindOpenAI = "openai"
)

// DefaultOllamaURL is where a local ollama listens.
const DefaultOllamaURL = "http://127.0.0.1:11434"

// Options configure New.
type Options struct {
	Kind  string // ollama | openai
	URL   string // base URL (".../v1" or the full endpoint also work)
	Model string // the server's model name
	// APIKey is sent as a bearer token when set.
	APIKey string
	// Dim, when set, is checked against the server instead of probed.
	Dim int
	// MaxBatch bounds the texts per request (default 64).
	MaxBatch int
	// Timeout bounds one request (default 60s); Retries bounds retries of 429 and 5xx (default 3).
	Timeout time.Duration
	Retries int
	Client  *http.Client
}

// Embedder implements embed.Embedder over HTTP. It is safe for concurrent use.
type Embedder struct {
	opt      Options
	endpoint string
	dim      int
}

// New checks the options and learns the vector dimension with one request (unless Dim is set).
func New(ctx context.Context, opt Options) (*Embedder, error) {
	if opt.Model == "" {
		return nil, errors.New("http embedder: memory.embed_model is required")
	}
	ep, err := endpoint(opt.Kind, opt.URL)
	if err != nil {
		return nil, err
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 64
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 60 * time.Second
	}
	if opt.Retries <= 0 {
		opt.Retries = 3
	}
	if opt.Client == nil {
		opt.Client = http.DefaultClient
	}
	e := &Embedder{opt: opt, endpoint: ep, dim: opt.Dim}
	if e.dim == 0 {
		v, err := e.call(ctx, []string{"dimension probe"})
		if err != nil {
			return nil, fmt.Errorf("http embedder %s: probe: %w", ep, err)
		}
		e.dim = len(v[0])
	}
	return e, nil
}

func endpoint(kind, base string) (string, error) {
	switch kind {
	case KindOllama:
		if base == "" {
			base = DefaultOllamaURL
		}
	case KindOpenAI:
		if base == "" {
			return "", errors.New("http embedder: memory.embed_url is required for an OpenAI-compatible server")
		}
	default:
		return "", fmt.Errorf("http embedder: kind %q (want ollama or openai)", kind)
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("http embedder: memory.embed_url %q is not an http(s) URL", base)
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case kind == KindOllama && strings.HasSuffix(p, "/api/embed"):
	case kind == KindOllama:
		p += "/api/embed"
	case strings.HasSuffix(p, "/embeddings"):
	case strings.HasSuffix(p, "/v1"):
		p += "/embeddings"
	default:
		p += "/v1/embeddings"
	}
	u.Path = p
	return u.String(), nil
}

// Dim implements embed.Embedder.
func (e *Embedder) Dim() int { return e.dim }

// Model implements embed.Embedder: the kind and the server's model name.
func (e *Embedder) Model() string { return e.opt.Kind + ":" + e.opt.Model }

// Close implements embed.Embedder.
func (e *Embedder) Close() error { return nil }

// Embed implements embed.Embedder.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += e.opt.MaxBatch {
		chunk := texts[start:min(start+e.opt.MaxBatch, len(texts))]
		vecs, err := e.call(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("embed with %s at %s: %w", e.Model(), e.endpoint, err)
		}
		for _, v := range vecs {
			if len(v) != e.dim {
				return nil, fmt.Errorf("embed with %s: server returned %d dims, expected %d", e.Model(), len(v), e.dim)
			}
		}
		out = append(out, vecs...)
	}
	return out, nil
}

type request struct {
	Model string   `json:"model"`
	Input []string `json:"input"`
}

type ollamaResponse struct {
	Embeddings [][]float32 `json:"embeddings"`
	Error      string      `json:"error"`
}

type openAIResponse struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// httpError is a non-2xx answer.
type httpError struct {
	status int
	msg    string
}

func (h *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", h.status, h.msg) }

func retryable(err error) bool {
	var h *httpError
	if errors.As(err, &h) {
		return h.status == http.StatusTooManyRequests || h.status >= 500
	}
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) // network errors
}

func (e *Embedder) call(ctx context.Context, texts []string) ([][]float32, error) {
	body, err := json.Marshal(request{Model: e.opt.Model, Input: texts})
	if err != nil {
		return nil, err
	}
	wait := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		vecs, err := e.once(ctx, body, len(texts))
		if err == nil || attempt >= e.opt.Retries || !retryable(err) {
			return vecs, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait *= 2
	}
}

func (e *Embedder) once(ctx context.Context, body []byte, n int) ([][]float32, error) {
	ctx, cancel := context.WithTimeout(ctx, e.opt.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if e.opt.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.opt.APIKey)
	}
	resp, err := e.opt.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	var vecs [][]float32
	if e.opt.Kind == KindOllama {
		var r ollamaResponse
		if jerr := json.Unmarshal(raw, &r); resp.StatusCode/100 != 2 || jerr != nil {
			return nil, answerError(resp.StatusCode, r.Error, raw, jerr)
		}
		vecs = r.Embeddings
	} else {
		var r openAIResponse
		jerr := json.Unmarshal(raw, &r)
		if resp.StatusCode/100 != 2 || jerr != nil {
			msg := ""
			if r.Error != nil {
				msg = r.Error.Message
			}
			return nil, answerError(resp.StatusCode, msg, raw, jerr)
		}
		vecs = make([][]float32, len(r.Data))
		for _, d := range r.Data {
			if d.Index < 0 || d.Index >= len(vecs) {
				return nil, fmt.Errorf("response index %d out of range", d.Index)
			}
			vecs[d.Index] = d.Embedding
		}
	}
	if len(vecs) != n {
		return nil, fmt.Errorf("server returned %d vectors for %d texts", len(vecs), n)
	}
	for i, v := range vecs {
		if err := normalize(v); err != nil {
			return nil, fmt.Errorf("vector %d: %w", i, err)
		}
	}
	return vecs, nil
}

func answerError(status int, msg string, raw []byte, jerr error) error {
	if status/100 == 2 {
		return fmt.Errorf("decode response: %w", jerr)
	}
	if msg == "" {
		msg = strings.TrimSpace(string(raw))
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
	}
	return &httpError{status: status, msg: msg}
}

func normalize(v []float32) error {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n == 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		return errors.New("zero or non-finite vector")
	}
	inv := 1 / math.Sqrt(n)
	for i := range v {
		v[i] = float32(float64(v[i]) * inv)
	}
	return nil
}
