package toon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

type refRequest struct {
	Op        string         `json:"op"`
	Input     string         `json:"input"`
	Options   map[string]any `json:"options,omitempty"`
	JSON      string         `json:"json,omitempty"`
	MinMillis int            `json:"minMillis,omitempty"`
}

type refResponse struct {
	OK          bool    `json:"ok"`
	Out         string  `json:"out"`
	Error       string  `json:"error"`
	EncodeNs    float64 `json:"encodeNs"`
	DecodeNs    float64 `json:"decodeNs"`
	StringifyNs float64 `json:"stringifyNs"`
	ParseNs     float64 `json:"parseNs"`
}

// runReference sends all requests to one node process running the pinned
// reference implementation.
func runReference(t testing.TB, reqs []refRequest) []refResponse {
	t.Helper()
	mods := nodeModules(t)
	if _, err := os.Stat(filepath.Join(mods, "@toon-format", "toon", "package.json")); err != nil {
		devtest.Missing(t, "the reference implementation @toon-format/toon under "+mods)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		devtest.Missing(t, "node")
	}
	in, err := json.Marshal(reqs)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join("testdata", "reference.mjs"))
	cmd.Env = append(os.Environ(), "TOON_NODE_MODULES="+mods)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference implementation: %v\n%s", err, stderr.String())
	}
	var resp []refResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("reference implementation output: %v", err)
	}
	if len(resp) != len(reqs) {
		t.Fatalf("reference implementation answered %d of %d requests", len(resp), len(reqs))
	}
	return resp
}

var featurePatterns = []struct{ name, re string }{
	{"tabular headers", `\]\{`},
	{"nested field groups", `\{[^}\n]*\{`},
	{"keyed headers", `\[\d+:[\t|]?\]`},
	{"list items", `(?m)^ *- `},
	{"tabular first field of a list item", `(?m)^ *- [^\n]*\]\{[^\n]*:$`},
	{"quoted values", `: "`},
	{"quoted keys", `(?m)^ *(- )?"`},
	{"escapes", `\\[nrt"\\u]`},
	{"exponent numbers", `\de[+-]\d`},
	{"empty arrays", `: \[\]|\[0[\t|]?\]:`},
}

func featureCounts[T any](items []T, text func(T) string) string {
	var parts []string
	for _, f := range featurePatterns {
		re := regexp.MustCompile(f.re)
		n := 0
		for _, it := range items {
			if re.MatchString(text(it)) {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("%s %d", f.name, n))
	}
	return strings.Join(parts, ", ")
}

type optionSet struct {
	name string
	enc  EncodeOptions
	dec  DecodeOptions
	js   map[string]any // encoder options for the reference
	jsd  map[string]any // decoder options for the reference
}

var differentialOptionSets = []optionSet{
	{name: "default", js: map[string]any{}, jsd: map[string]any{}},
	{name: "tab", enc: EncodeOptions{Delimiter: Tab}, js: map[string]any{"delimiter": "\t"}, jsd: map[string]any{}},
	{name: "pipe", enc: EncodeOptions{Delimiter: Pipe}, js: map[string]any{"delimiter": "|"}, jsd: map[string]any{}},
	{name: "indent4", enc: EncodeOptions{IndentSize: 4}, dec: DecodeOptions{IndentSize: 4}, js: map[string]any{"indentSize": 4}, jsd: map[string]any{"indentSize": 4}},
	{name: "pipe-indent1-nonstrict", enc: EncodeOptions{Delimiter: Pipe, IndentSize: 1}, dec: DecodeOptions{IndentSize: 1, NonStrict: true},
		js: map[string]any{"delimiter": "|", "indentSize": 1}, jsd: map[string]any{"indentSize": 1, "strict": false}},
}

// TestDifferentialReference checks, for seeded random values with
// adversarial strings and keys, that the Go encoder output is
// byte-identical to the reference implementation's and that each side
// decodes the other's output to the same value.
func TestDifferentialReference(t *testing.T) {
	const values = 600
	g := newGen(20261122)
	vals := make([]any, values)
	jsonTexts := make([]string, values)
	for i := range vals {
		vals[i] = jsKeyOrder(g.value(0))
		b, err := appendJSON(nil, vals[i])
		if err != nil {
			t.Fatal(err)
		}
		jsonTexts[i] = string(b)
	}
	type job struct {
		val    int
		opts   optionSet
		goToon string
	}
	var jobs []job
	var reqs []refRequest
	for i := range vals {
		for _, o := range differentialOptionSets {
			out, err := Encode(vals[i], o.enc)
			if err != nil {
				t.Fatalf("value %d %s: encode: %v", i, o.name, err)
			}
			jobs = append(jobs, job{val: i, opts: o, goToon: string(out)})
			reqs = append(reqs,
				refRequest{Op: "encode", Input: jsonTexts[i], Options: o.js},
				refRequest{Op: "decode", Input: string(out), Options: o.jsd})
		}
	}
	resp := runReference(t, reqs)
	failures := 0
	fail := func(format string, args ...any) {
		failures++
		if failures <= 15 {
			t.Errorf(format, args...)
		}
	}
	for k, j := range jobs {
		enc, dec := resp[2*k], resp[2*k+1]
		v := vals[j.val]
		where := fmt.Sprintf("value %d (%s) %s", j.val, j.opts.name, jsonTexts[j.val])
		if !enc.OK {
			fail("%s: reference encode failed: %s", where, enc.Error)
			continue
		}
		if enc.Out != j.goToon {
			fail("%s: encodings differ\n  go: %q\n ref: %q", where, j.goToon, enc.Out)
			continue
		}
		// Go decodes the reference's output.
		goDec, err := DecodeString(enc.Out, j.opts.dec)
		if err != nil {
			fail("%s: Go cannot decode the reference output: %v\n%s", where, err, enc.Out)
			continue
		}
		if !equalUnordered(goDec, v) {
			js, _ := appendJSON(nil, goDec)
			fail("%s: Go decoded the reference output to %s", where, js)
			continue
		}
		// The reference decodes Go's output.
		if !dec.OK {
			fail("%s: reference cannot decode Go output: %s\n%s", where, dec.Error, j.goToon)
			continue
		}
		refDec, err := ParseJSON(bytes.NewReader([]byte(dec.Out)))
		if err != nil {
			t.Fatal(err)
		}
		if !equalUnordered(refDec, v) || !Equal(refDec, jsKeyOrder(goDec)) {
			js, _ := appendJSON(nil, goDec)
			fail("%s: reference decoded Go output to %s, Go to %s", where, dec.Out, js)
		}
	}
	t.Logf("differential: %d values x %d option sets = %d encodings compared with the reference, %d failures",
		values, len(differentialOptionSets), len(jobs), failures)
	t.Logf("features in the Go encodings: %s", featureCounts(jobs, func(j job) string { return j.goToon }))
}
