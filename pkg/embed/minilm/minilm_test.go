package minilm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
)

var _ embed.Embedder = (*minilm.Embedder)(nil)

var (
	shared     *minilm.Embedder
	sharedErr  error
	sharedOnce sync.Once
)

// open returns one embedder for the whole package; loading the model takes a moment.
func open(tb testing.TB) *minilm.Embedder {
	tb.Helper()
	sharedOnce.Do(func() { shared, sharedErr = minilm.Open(minilm.Options{}) })
	if sharedErr != nil {
		if errors.Is(sharedErr, minilm.ErrNotInstalled) && !devenv.Required() {
			tb.Skipf("all-MiniLM-L6-v2 not installed (run `make setup`): %v", sharedErr)
		}
		tb.Fatalf("open embedder: %v", sharedErr)
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	os.Exit(code)
}

type reference struct {
	Implementation string `json:"implementation"`
	Sentences      []struct {
		Text   string    `json:"text"`
		IDs    []int     `json:"ids"`
		Vector []float64 `json:"vector"`
	} `json:"sentences"`
}

func loadReference(t *testing.T) reference {
	_, dir := minilm.Paths(minilm.Options{})
	path := filepath.Join(dir, "reference.json")
	b, err := os.ReadFile(path)
	if err != nil {
		if !devenv.Required() {
			t.Skipf("reference vectors missing (run `make setup`): %v", err)
		}
		t.Fatalf("reference vectors: %v", err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Sentences) < 10 {
		t.Fatalf("reference has %d sentences", len(r.Sentences))
	}
	return r
}

func cosine(a []float32, b []float64) float64 {
	var d, na, nb float64
	for i := range a {
		d += float64(a[i]) * b[i]
		na += float64(a[i]) * float64(a[i])
		nb += b[i] * b[i]
	}
	return d / math.Sqrt(na*nb)
}

// TestTokenizerMatchesReference compares the Go WordPiece ids with Hugging Face tokenizers'.
func TestTokenizerMatchesReference(t *testing.T) {
	e := open(t)
	ref := loadReference(t)
	for _, s := range ref.Sentences {
		got, err := e.Tokenize(s.Text)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, s.IDs) {
			t.Errorf("%.40q: ids\n got %v\nwant %v", s.Text, got, s.IDs)
		}
	}
}

// TestTokenizerMatchesGolden compares the Go WordPiece ids with Hugging Face tokenizers' on the
// awkward cases and generated sentences of testdata/wordpiece_golden.json
// (scripts/wordpiece_golden.py).
func TestTokenizerMatchesGolden(t *testing.T) {
	e := open(t)
	b, err := os.ReadFile(filepath.Join("testdata", "wordpiece_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden []struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	for _, g := range golden {
		got, err := e.Tokenize(g.Text)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, g.IDs) {
			t.Errorf("%.60q: ids\n got %v\nwant %v", g.Text, got, g.IDs)
		}
	}
}

// TestVectorsMatchReference checks the Go vectors (batched, so padding and the attention mask
// matter) against the independent reference at cosine >= 0.999.
func TestVectorsMatchReference(t *testing.T) {
	e := open(t)
	ref := loadReference(t)
	texts := make([]string, len(ref.Sentences))
	for i, s := range ref.Sentences {
		texts[i] = s.Text
	}
	for _, batch := range []int{1, len(texts)} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			var got [][]float32
			for start := 0; start < len(texts); start += batch {
				v, err := e.Embed(context.Background(), texts[start:min(start+batch, len(texts))])
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, v...)
			}
			for i, s := range ref.Sentences {
				if len(got[i]) != minilm.Dim {
					t.Fatalf("dim %d", len(got[i]))
				}
				var n float64
				for _, x := range got[i] {
					n += float64(x) * float64(x)
				}
				if math.Abs(n-1) > 1e-4 {
					t.Errorf("%.40q: |v|^2 = %f, want 1", s.Text, n)
				}
				if c := cosine(got[i], s.Vector); c < 0.999 {
					t.Errorf("%.40q: cosine to reference %.6f < 0.999", s.Text, c)
				}
			}
		})
	}
}

func TestSemantics(t *testing.T) {
	e := open(t)
	v, err := e.Embed(context.Background(), []string{
		"Quote file paths that contain spaces.",
		"Put quotes around paths with spaces in them.",
		"The weather in Lisbon is sunny today.",
	})
	if err != nil {
		t.Fatal(err)
	}
	dot := func(a, b []float32) (s float64) {
		for i := range a {
			s += float64(a[i] * b[i])
		}
		return
	}
	if near, far := dot(v[0], v[1]), dot(v[0], v[2]); near < 0.7 || far > 0.3 {
		t.Fatalf("paraphrase cosine %.3f, unrelated %.3f", near, far)
	}
}

func TestConcurrentEmbedAgrees(t *testing.T) {
	e := open(t)
	texts := []string{"alpha beta", "a much longer sentence about tools failing", "x", ""}
	want, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := e.Embed(context.Background(), texts)
			if err != nil {
				errs <- err
				return
			}
			for i := range got {
				var d float64
				for k := range got[i] {
					d += float64(got[i][k] * want[i][k])
				}
				if d < 0.99999 {
					errs <- fmt.Errorf("text %d differs under concurrency: cosine %f", i, d)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestMissingInstallIsExplained(t *testing.T) {
	_, err := minilm.Open(minilm.Options{LibPath: filepath.Join(t.TempDir(), "libonnxruntime.so"), ModelDir: t.TempDir()})
	if !errors.Is(err, minilm.ErrNotInstalled) {
		t.Fatalf("err %v, want ErrNotInstalled", err)
	}
	if want := "make setup"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// Texts of the embedder benchmarks; scripts/ortbench.py runs Python onnxruntime on the same ones.
var (
	benchOne = []string{"The tool failed with permission denied while writing to /var/log; run it with a writable log dir."}
	benchB32 = func() []string {
		texts := make([]string, 32)
		for i := range texts {
			texts[i] = fmt.Sprintf("Guideline %d: check the exit status of step %d and retry transient network errors with backoff.", i, i*7)
		}
		return texts
	}()
)

func benchEmbed(b *testing.B, e *minilm.Embedder, texts []string) {
	ctx := context.Background()
	// Three calls first, as scripts/ortbench.py makes: the first run of a shape plans its memory.
	for range 3 {
		if _, err := e.Embed(ctx, texts); err != nil {
			b.Fatal(err)
		}
	}
	c0 := devtest.CPUTime()
	for b.Loop() {
		if _, err := e.Embed(ctx, texts); err != nil {
			b.Fatal(err)
		}
	}
	devtest.ReportCPU(b, c0)
	b.ReportMetric(float64(b.N*len(texts))/b.Elapsed().Seconds(), "texts/s")
}

func BenchmarkEmbedSingle(b *testing.B) { benchEmbed(b, open(b), benchOne) }

func BenchmarkEmbedBatch32(b *testing.B) { benchEmbed(b, open(b), benchB32) }

// One intra-op thread: the per-text cost without thread hand-offs, and the fair comparison with
// scripts/ortbench.py --threads 1 on a busy machine.
func BenchmarkEmbedSingle1Thread(b *testing.B) { benchEmbed(b, open1(b), benchOne) }

func BenchmarkEmbedBatch32_1Thread(b *testing.B) { benchEmbed(b, open1(b), benchB32) }

var (
	oneOnce sync.Once
	one     *minilm.Embedder
	oneErr  error
)

func open1(tb testing.TB) *minilm.Embedder {
	open(tb) // skips or fails like the shared one
	oneOnce.Do(func() { one, oneErr = minilm.Open(minilm.Options{Threads: 1}) })
	if oneErr != nil {
		tb.Fatal(oneErr)
	}
	return one
}

// BenchmarkTokenize: the tokenizer's share of an Embed call (32 texts per op).
func BenchmarkTokenize(b *testing.B) {
	e := open(b)
	c0 := devtest.CPUTime()
	for b.Loop() {
		for _, t := range benchB32 {
			if _, err := e.Tokenize(t); err != nil {
				b.Fatal(err)
			}
		}
	}
	devtest.ReportCPU(b, c0)
}
