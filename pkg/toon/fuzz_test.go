package toon

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var writeCorpus = flag.Bool("toon.writecorpus", false, "regenerate testdata/fuzz/FuzzDecode seed files")

// fuzzSeeds are hand-written documents that reach every decoder path,
// valid and malformed.
var fuzzSeeds = []string{
	"", "a: 1", "hello", "[]", "[0]:", "[3]: 1,2,3", "[2|]: a|b", "[2\t]: a\tb",
	"users[2]{id,name}:\n  1,Ada\n  2,Bob", "orders[1]{id,c{n,k}}:\n  1,x,y",
	"users[2:]{age,city}:\n  alice: 30,Berlin\n  bob: 25,Oslo", "[2:]{a}:\n  x: 1\n  y: 2",
	"items[3]:\n  - 1\n  - a: 1\n    b: 2\n  - [2]: x,y", "items[1]:\n  - rows[1]{a}:\n      1\n    z: 2",
	"a:\n  b:\n    c: \"q\\\"\\u00e9\"", "# comment\na: 1\n  # indented comment\nb: 2",
	"a: 1\r\nb: 2\r\n", "\ufeffa: 1", "\"k:ey\"[1]: \"v,\"", "a[2]: 1", "a:\n    b: 1", "a: 1\n  b: 2",
	"a: 1\na: 2", "[1]: x\ny: 2", "x\ny", "a[03]: 1", "a[]: 1", "a[2]{}:", "a[1]{b,c}: 1",
	"a[1|]{b,c}:\n  1|2", "a[2]:\n  - 1\n\n  - 2", "a: \"unterminated", "a: \"bad\\x\"", "\ta: 1",
	"a:\n   b: 1", "k: \"\\ud800\"", "k[1]: \"a\" b", "- x", "-", "a[1]:\n  -", "a[1]:\n  - []",
	"n: -0\nm: 1.5000\ne: 1E+03\nz: 05\np: +5", "a[2]{x}:\n  1\n  2\n  3",
	"a[1:]{x}:\n  k: 1,2", "a[1:]{x}:\n  noColon", "[1][2]: x", "a:b[2]: x", "a[2]extra: a,b",
	"a[1]{b{c{d}},e{f}}:\n  1,2,3", "a[1]{b{}}:", "a[1]{b{c}d}:", "a[1]{ b {c}}:", "a[1]{\"x{\"{y}}:\n  1",
}

func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, doc string, mode uint8) {
		opts := DecodeOptions{NonStrict: mode&1 == 1, IndentSize: 1 + int(mode>>1)%4, MaxDepth: 200, MaxLength: 1 << 20}
		v, err := DecodeString(doc, opts)
		if err != nil {
			if _, ok := err.(*SyntaxError); !ok {
				t.Fatalf("error is not a *SyntaxError: %v", err)
			}
			se := err.(*SyntaxError)
			if se.Line < 1 || se.Column < 1 {
				t.Fatalf("error without a position: %v", err)
			}
			return
		}
		// Whatever decodes must survive an encode/decode round trip.
		enc, err := Encode(v, EncodeOptions{IndentSize: opts.IndentSize})
		if err != nil {
			t.Fatalf("encode of a decoded value failed: %v", err)
		}
		v2, err := DecodeString(string(enc), DecodeOptions{IndentSize: opts.IndentSize, MaxDepth: 10000})
		if err != nil {
			t.Fatalf("re-decode failed: %v\ndoc: %q\nenc: %q", err, doc, enc)
		}
		if !equalUnordered(v, v2) {
			t.Fatalf("round trip changed the value\ndoc: %q\nenc: %q", doc, enc)
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	g := newGen(7)
	for i := 0; i < 40; i++ {
		b, _ := appendJSON(nil, jsKeyOrder(g.value(0)))
		f.Add(b, uint8(i))
	}
	f.Fuzz(func(t *testing.T, js []byte, mode uint8) {
		v, err := ParseJSON(bytes.NewReader(js))
		if err != nil {
			return
		}
		eo := EncodeOptions{Delimiter: []Delimiter{Comma, Tab, Pipe}[int(mode)%3], IndentSize: 1 + int(mode>>2)%4}
		enc, err := Encode(v, eo)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		back, err := DecodeString(string(enc), DecodeOptions{IndentSize: eo.IndentSize, MaxDepth: 20000})
		if err != nil {
			t.Fatalf("decode of encoder output failed: %v\njson: %s\ntoon: %q", err, js, enc)
		}
		if !equalUnordered(v, back) {
			got, _ := appendJSON(nil, back)
			t.Fatalf("round trip changed the value\njson: %s\n got: %s\ntoon: %q", js, got, enc)
		}
	})
}

// TestWriteFuzzCorpus regenerates the committed seed corpus with
// -toon.writecorpus; it does nothing otherwise.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("run with -toon.writecorpus to regenerate testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	g := newGen(99)
	docs := append([]string(nil), fuzzSeeds...)
	for i := 0; i < 60; i++ {
		b, err := Encode(jsKeyOrder(g.value(0)), EncodeOptions{Delimiter: []Delimiter{Comma, Tab, Pipe}[i%3]})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
		// A truncated copy exercises count checks.
		if n := len(b); n > 4 {
			docs = append(docs, string(b[:n*2/3]))
		}
	}
	// Deep nesting and huge declarations.
	docs = append(docs, strings.Repeat("a:\n", 1)+nestedDoc(300), "a[99999999999999999999]: 1", "[268435456]:\n  - 1")
	for i, d := range docs {
		body := fmt.Sprintf("go test fuzz v1\nstring(%q)\nbyte(%q)\n", d, byte(i%8))
		name := filepath.Join(dir, fmt.Sprintf("seed-%03d", i))
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d seeds to %s", len(docs), dir)
}

func nestedDoc(levels int) string {
	var b strings.Builder
	for i := 0; i < levels; i++ {
		b.WriteString(strings.Repeat("  ", i))
		b.WriteString("k:\n")
	}
	b.WriteString(strings.Repeat("  ", levels))
	b.WriteString("v: 1")
	return b.String()
}
