// Package benchcorpus makes the text corpus the memory benchmarks and recall tests search: guideline-like
// sentences generated from templates (deterministic for a seed, never committed), embedded with
// the real all-MiniLM-L6-v2 and cached as raw float32 files under the tools folder, because
// embedding 100k sentences takes many minutes on two cores.
package benchcorpus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/skein-mesh/skein/pkg/devenv"
)

var (
	verbs    = []string{"quote", "check", "retry", "validate", "escape", "log", "cache", "pin", "lock", "close", "flush", "compress", "sign", "trim", "sort", "stream", "batch", "time out", "rotate", "mount"}
	objects  = []string{"file paths", "exit codes", "HTTP responses", "database transactions", "JSON payloads", "shell arguments", "environment variables", "TLS certificates", "API tokens", "log files", "temporary directories", "git branches", "docker images", "CSV columns", "unicode input", "network sockets", "cron schedules", "S3 uploads", "SQL queries", "YAML configs", "image thumbnails", "PDF reports", "email attachments", "timezone offsets", "currency amounts"}
	tools    = []string{"grep", "curl", "git", "psql", "jq", "tar", "rsync", "ffmpeg", "kubectl", "terraform", "pandoc", "sed", "awk", "docker", "pytest", "go test", "npm", "make", "ssh", "openssl"}
	contexts = []string{"before writing to disk", "when the server returns 429", "after a partial failure", "on slow networks", "for files with spaces in their names", "when the input is empty", "under heavy load", "inside CI jobs", "for non-ASCII text", "when credentials expire", "across daylight saving changes", "on the first run", "when the disk is full", "for very large inputs", "after an upgrade"}
	reasons  = []string{"otherwise the step fails silently", "because the tool truncates output", "since retries can duplicate work", "or the parser rejects the result", "because the default is unsafe", "to keep results reproducible", "or the job times out", "since the API is rate limited", "because errors hide in stderr", "so that reruns are idempotent"}
	forms    = []string{
		"Always %[1]s %[2]s with %[3]s %[4]s, %[5]s.",
		"Never forget to %[1]s %[2]s %[4]s when using %[3]s; %[5]s.",
		"When %[3]s handles %[2]s, %[1]s them %[4]s.",
		"%[3]s failed on %[2]s %[4]s: %[1]s them first, %[5]s.",
		"Prefer to %[1]s %[2]s before calling %[3]s %[4]s.",
		"To avoid errors with %[2]s in %[3]s, %[1]s them %[4]s, %[5]s.",
	}
)

// Sentences returns n generated sentences for seed (the same for the same arguments).
func Sentences(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]string, n)
	for i := range out {
		f := forms[rng.IntN(len(forms))]
		s := fmt.Sprintf(f, verbs[rng.IntN(len(verbs))], objects[rng.IntN(len(objects))], tools[rng.IntN(len(tools))],
			contexts[rng.IntN(len(contexts))], reasons[rng.IntN(len(reasons))])
		out[i] = strings.ToUpper(s[:1]) + s[1:]
	}
	return out
}

// Seeds of the corpus and of the queries asked of it (different sentences, same vocabulary).
const (
	CorpusSeed = 1
	QuerySeed  = 2
)

// Embedder is what Vectors needs of an embedder.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Dim() int
	Model() string
}

// Dir is where cached vectors live: $SKEIN_BENCH_CACHE, else <tools>/memory/benchcorpus.
func Dir() string {
	if d := os.Getenv("SKEIN_BENCH_CACHE"); d != "" {
		return d
	}
	return filepath.Join(devenv.ToolsDir(), "memory", "benchcorpus")
}

// Vectors returns the embeddings of Sentences(seed, n), reading what the cache file holds and
// embedding (and appending) the rest in batches; an interrupted run resumes where it stopped.
// progress, when not nil, is called after each batch with how many are done.
func Vectors(ctx context.Context, e Embedder, seed uint64, n int, progress func(done int)) ([][]float32, error) {
	dim := e.Dim()
	name := fmt.Sprintf("%s-seed%d-dim%d.f32", strings.NewReplacer("/", "_", "+", "_", ":", "_").Replace(e.Model()), seed, dim)
	path := filepath.Join(Dir(), name)
	if err := os.MkdirAll(Dir(), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	row := int64(dim * 4)
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	have := int(st.Size() / row)
	if have < n {
		// Appending: one writer at a time (another process may be warming the same file),
		// then look again at what it left.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		if st, err = f.Stat(); err != nil {
			return nil, err
		}
		have = int(st.Size() / row)
		if err := f.Truncate(int64(have) * row); err != nil { // drop a torn last row
			return nil, err
		}
	}
	out := make([][]float32, 0, n)
	buf := make([]byte, row)
	for i := 0; i < min(have, n); i++ {
		if _, err := io.ReadFull(f, buf); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		v := make([]float32, dim)
		for j := range v {
			v[j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[j*4:]))
		}
		out = append(out, v)
	}
	if have >= n {
		return out, nil
	}
	if _, err := f.Seek(int64(have)*row, io.SeekStart); err != nil {
		return nil, err
	}
	texts := Sentences(seed, n)
	const batch = 256
	for start := have; start < n; start += batch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		vecs, err := e.Embed(ctx, texts[start:min(start+batch, n)])
		if err != nil {
			return nil, err
		}
		wb := make([]byte, 0, len(vecs)*int(row))
		for _, v := range vecs {
			if len(v) != dim {
				return nil, errors.New("embedder returned a vector of another dimension")
			}
			for _, x := range v {
				wb = binary.LittleEndian.AppendUint32(wb, math.Float32bits(x))
			}
		}
		if _, err := f.Write(wb); err != nil {
			return nil, err
		}
		out = append(out, vecs...)
		if progress != nil {
			progress(len(out))
		}
	}
	return out, nil
}
