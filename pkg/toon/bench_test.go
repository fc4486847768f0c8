package toon

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/tokenize"
)

var report = flag.Bool("toon.report", false, "print the token and throughput report for docs/benchmarks.md")

type corpusDoc struct {
	name    string
	value   any    // ordered model
	generic any    // what json.Unmarshal into any produces
	compact []byte // compact JSON, the common size base for MB/s
	toon    []byte
}

func loadCorpus(t testing.TB) []corpusDoc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	sort.Strings(files)
	var docs []corpusDoc
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v, err := ParseJSONBytes(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		compact, err := appendJSON(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		var generic any
		if err := json.Unmarshal(raw, &generic); err != nil {
			t.Fatal(err)
		}
		enc, err := Encode(v, EncodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, corpusDoc{name: strings.TrimSuffix(filepath.Base(f), ".json"), value: v, generic: generic, compact: compact, toon: enc})
	}
	return docs
}

// TestCorpusTokenSavings checks the point of the format on realistic tool
// results: uniform data (listings, rows, logs, hits) must cost clearly fewer
// o200k_base tokens as TOON than as compact JSON, and every document must
// round-trip.
func TestCorpusTokenSavings(t *testing.T) {
	var jsonTotal, toonTotal int
	for _, d := range loadCorpus(t) {
		back, err := DecodeBytes(d.toon, DecodeOptions{})
		if err != nil {
			t.Fatalf("%s: decode: %v", d.name, err)
		}
		if !equalUnordered(back, d.value) {
			t.Fatalf("%s: round trip changed the value", d.name)
		}
		jt, tt := tokenize.Count(string(d.compact)), tokenize.Count(string(d.toon))
		jsonTotal += jt
		toonTotal += tt
		switch d.name {
		case "dir_listing", "table_rows", "logs", "search_hits", "dependencies":
			if float64(tt) > 0.8*float64(jt) {
				t.Errorf("%s: TOON %d tokens vs compact JSON %d: expected at least 20%% fewer", d.name, tt, jt)
			}
		}
	}
	if toonTotal >= jsonTotal {
		t.Errorf("corpus: TOON %d tokens, compact JSON %d", toonTotal, jsonTotal)
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, d := range loadCorpus(b) {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(d.compact)))
			for b.Loop() {
				if _, err := Encode(d.value, EncodeOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, d := range loadCorpus(b) {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(d.compact)))
			for b.Loop() {
				if _, err := DecodeBytes(d.toon, DecodeOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkJSONMarshal(b *testing.B) {
	for _, d := range loadCorpus(b) {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(d.compact)))
			for b.Loop() {
				if _, err := json.Marshal(d.generic); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkJSONUnmarshal(b *testing.B) {
	for _, d := range loadCorpus(b) {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(d.compact)))
			for b.Loop() {
				var v any
				if err := json.Unmarshal(d.compact, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func mbps(bytes int, nsPerOp float64) float64 {
	if nsPerOp <= 0 {
		return 0
	}
	return float64(bytes) / nsPerOp * 1e9 / 1e6
}

// medianNs times op in 5 rounds of at least 200ms and returns the median
// nanoseconds per call; the rounds of different ops are interleaved by the
// caller so that load bursts on a shared machine hit all of them alike.
func medianNs(ops []func()) []float64 {
	const rounds = 5
	samples := make([][]float64, len(ops))
	for _, op := range ops {
		op() // warm up
	}
	for r := 0; r < rounds; r++ {
		for i, op := range ops {
			n := 0
			start := time.Now()
			for time.Since(start) < 200*time.Millisecond || n < 3 {
				op()
				n++
			}
			samples[i] = append(samples[i], float64(time.Since(start).Nanoseconds())/float64(n))
		}
	}
	out := make([]float64, len(ops))
	for i, s := range samples {
		sort.Float64s(s)
		out[i] = s[rounds/2]
	}
	return out
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// TestTokenReport prints the tables of docs/benchmarks.md (## TOON). It
// runs only with -toon.report (make toon-bench).
func TestTokenReport(t *testing.T) {
	if !*report {
		t.Skip("run with -toon.report (make toon-bench)")
	}
	docs := loadCorpus(t)
	loadBefore := loadAverage()
	reqs := make([]refRequest, len(docs))
	for i, d := range docs {
		// The reference must produce the same document we measure.
		reqs[i] = refRequest{Op: "encode", Input: string(d.compact), Options: map[string]any{}}
	}
	same := runReference(t, reqs)

	var out strings.Builder
	fmt.Fprintf(&out, "Tokens (o200k_base) per document, TOON with default options:\n\n")
	fmt.Fprintf(&out, "| document | JSON bytes | TOON bytes | JSON tokens | TOON tokens | TOON vs JSON |\n|---|---:|---:|---:|---:|---:|\n")
	var jb, tb, jt, tt int
	for i, d := range docs {
		if r := same[i]; !r.OK || r.Out != string(d.toon) {
			t.Fatalf("%s: reference encoding differs from ours", d.name)
		}
		j, k := tokenize.Count(string(d.compact)), tokenize.Count(string(d.toon))
		jb, tb, jt, tt = jb+len(d.compact), tb+len(d.toon), jt+j, tt+k
		fmt.Fprintf(&out, "| %s | %d | %d | %d | %d | %+.1f%% |\n", d.name, len(d.compact), len(d.toon), j, k, 100*float64(k-j)/float64(j))
	}
	fmt.Fprintf(&out, "| **all** | %d | %d | %d | %d | %+.1f%% |\n\n", jb, tb, jt, tt, 100*float64(tt-jt)/float64(jt))

	fmt.Fprintf(&out, "Throughput in MB/s of compact-JSON-equivalent bytes (higher is better), %s %s/%s, GOMAXPROCS=%d:\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&out, "| document | Go TOON encode | Go TOON decode | Go encoding/json Marshal | Go encoding/json Unmarshal | ref TOON encode | ref TOON decode | node JSON.stringify | node JSON.parse |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range docs {
		ns := medianNs([]func(){
			func() { _, _ = Encode(d.value, EncodeOptions{}) },
			func() { _, _ = DecodeBytes(d.toon, DecodeOptions{}) },
			func() { _, _ = json.Marshal(d.generic) },
			func() {
				var v any
				_ = json.Unmarshal(d.compact, &v)
			},
		})
		// The reference runs right after, per document, so that both
		// sides see about the same machine load.
		r := runReference(t, []refRequest{{Op: "bench", JSON: string(d.compact), MinMillis: 1000}})[0]
		if !r.OK {
			t.Fatalf("%s: reference bench: %s", d.name, r.Error)
		}
		n := len(d.compact)
		fmt.Fprintf(&out, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", d.name,
			mbps(n, ns[0]), mbps(n, ns[1]), mbps(n, ns[2]), mbps(n, ns[3]), mbps(n, r.EncodeNs), mbps(n, r.DecodeNs), mbps(n, r.StringifyNs), mbps(n, r.ParseNs))
	}
	fmt.Fprintf(&out, "\nLoad average before/after the throughput runs: %s / %s. Each figure is the median of 5 rounds.\n", loadBefore, loadAverage())
	fmt.Println(out.String())
}
