package httpembed_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/httpembed"
)

var _ embed.Embedder = (*httpembed.Embedder)(nil)

// fakeVec is deterministic per text and deliberately not unit length.
func fakeVec(text string, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(len(text)%7+1) * float32(i+1)
	}
	return v
}

type server struct {
	*httptest.Server
	calls  atomic.Int64
	fail   atomic.Int64 // answer 503 this many times first
	auth   atomic.Value
	maxIn  atomic.Int64
	models atomic.Value
}

func newServer(t *testing.T, kind string, dim int) *server {
	s := &server{}
	mux := http.NewServeMux()
	handle := func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request shape", http.StatusBadRequest)
			return
		}
		s.auth.Store(r.Header.Get("Authorization"))
		if s.fail.Load() > 0 {
			s.fail.Add(-1)
			http.Error(w, `{"error":"model is loading"}`, http.StatusServiceUnavailable)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.models.Store(req.Model)
		if int64(len(req.Input)) > s.maxIn.Load() {
			s.maxIn.Store(int64(len(req.Input)))
		}
		if req.Model == "missing" {
			w.WriteHeader(http.StatusNotFound)
			if kind == httpembed.KindOllama {
				json.NewEncoder(w).Encode(map[string]string{"error": `model "missing" not found, try pulling it first`})
			} else {
				json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": "The model `missing` does not exist", "type": "invalid_request_error"}})
			}
			return
		}
		if kind == httpembed.KindOllama {
			var out [][]float32
			for _, in := range req.Input {
				out = append(out, fakeVec(in, dim))
			}
			json.NewEncoder(w).Encode(map[string]any{"model": req.Model, "embeddings": out})
			return
		}
		// OpenAI lists data items with an index; send them reversed to check the client orders by it.
		var data []map[string]any
		for i := len(req.Input) - 1; i >= 0; i-- {
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": fakeVec(req.Input[i], dim)})
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model,
			"usage": map[string]int{"prompt_tokens": 3, "total_tokens": 3}})
	}
	if kind == httpembed.KindOllama {
		mux.HandleFunc("/api/embed", handle)
	} else {
		mux.HandleFunc("/v1/embeddings", handle)
	}
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func unit(t *testing.T, v []float32) {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if math.Abs(n-1) > 1e-5 {
		t.Fatalf("|v|^2 = %f", n)
	}
}

func TestKinds(t *testing.T) {
	for _, tc := range []struct{ kind, suffix string }{
		{httpembed.KindOllama, ""},
		{httpembed.KindOpenAI, ""},
		{httpembed.KindOpenAI, "/v1"},
		{httpembed.KindOpenAI, "/v1/embeddings"},
	} {
		t.Run(tc.kind+tc.suffix, func(t *testing.T) {
			srv := newServer(t, tc.kind, 12)
			ctx := context.Background()
			e, err := httpembed.New(ctx, httpembed.Options{Kind: tc.kind, URL: srv.URL + tc.suffix, Model: "nomic-embed-text", APIKey: "k1", MaxBatch: 3})
			if err != nil {
				t.Fatal(err)
			}
			if e.Dim() != 12 || e.Model() != tc.kind+":nomic-embed-text" {
				t.Fatalf("dim %d model %s", e.Dim(), e.Model())
			}
			texts := []string{"a", "bb", "ccc", "dddd", "eeeee", "ffffff", "g"}
			vecs, err := e.Embed(ctx, texts)
			if err != nil {
				t.Fatal(err)
			}
			if len(vecs) != len(texts) {
				t.Fatalf("%d vectors", len(vecs))
			}
			for i, v := range vecs {
				unit(t, v)
				want := fakeVec(texts[i], 12)
				if math.Abs(float64(v[3]/v[0])-float64(want[3]/want[0])) > 1e-5 {
					t.Fatalf("vector %d is not text %d's (order lost)", i, i)
				}
			}
			if srv.maxIn.Load() > 3 {
				t.Fatalf("a request carried %d texts, MaxBatch 3", srv.maxIn.Load())
			}
			if srv.auth.Load() != "Bearer k1" {
				t.Fatalf("auth header %q", srv.auth.Load())
			}
		})
	}
}

func TestRetriesUnavailable(t *testing.T) {
	srv := newServer(t, httpembed.KindOllama, 4)
	e, err := httpembed.New(context.Background(), httpembed.Options{Kind: httpembed.KindOllama, URL: srv.URL, Model: "m", Dim: 4})
	if err != nil {
		t.Fatal(err)
	}
	srv.fail.Store(2)
	if _, err := e.Embed(context.Background(), []string{"x"}); err != nil {
		t.Fatalf("after two 503s: %v", err)
	}
	if srv.calls.Load() != 3 {
		t.Fatalf("%d calls, want 3", srv.calls.Load())
	}
}

func TestServerErrorsNamed(t *testing.T) {
	for _, kind := range []string{httpembed.KindOllama, httpembed.KindOpenAI} {
		srv := newServer(t, kind, 4)
		_, err := httpembed.New(context.Background(), httpembed.Options{Kind: kind, URL: srv.URL, Model: "missing"})
		if err == nil || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("%s: error %v should carry the status and the server's message", kind, err)
		}
	}
}

func TestDimensionChecked(t *testing.T) {
	srv := newServer(t, httpembed.KindOpenAI, 8)
	e, err := httpembed.New(context.Background(), httpembed.Options{Kind: httpembed.KindOpenAI, URL: srv.URL, Model: "m", Dim: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Embed(context.Background(), []string{"x"}); err == nil || !strings.Contains(err.Error(), "8 dims") {
		t.Fatalf("dimension change not reported: %v", err)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []httpembed.Options{
		{Kind: "cohere", Model: "m", URL: "http://x"},
		{Kind: httpembed.KindOpenAI, Model: "m"},
		{Kind: httpembed.KindOllama},
		{Kind: httpembed.KindOllama, Model: "m", URL: "not a url"},
	} {
		if _, err := httpembed.New(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
