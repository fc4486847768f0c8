package toon

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// mutate makes small line-level and character-level edits to a valid
// document, producing the near-miss inputs decoders must judge.
func mutate(r *rand.Rand, doc string) string {
	lines := strings.Split(doc, "\n")
	for n := 1 + r.IntN(3); n > 0; n-- {
		i := r.IntN(len(lines))
		l := lines[i]
		switch r.IntN(10) {
		case 0:
			lines[i] = "  " + l
		case 1:
			lines[i] = strings.TrimPrefix(l, "  ")
		case 2:
			lines = append(lines[:i], lines[i+1:]...)
			if len(lines) == 0 {
				lines = []string{""}
			}
		case 3:
			lines = append(lines[:i+1], lines[i:]...)
		case 4:
			lines = append(lines[:i], append([]string{""}, lines[i:]...)...)
		case 5:
			lines = append(lines[:i], append([]string{strings.Repeat(" ", r.IntN(5)) + "# c"}, lines[i:]...)...)
		default:
			// Edit whole code points: the reference receives text, so
			// byte-level damage would not reach it intact.
			if rs := []rune(l); len(rs) > 0 {
				p := r.IntN(len(rs))
				ins := []string{":", ",", "|", "\t", "\"", "\\", "[", "]", "{", "}", "-", " ", "#", "0", "x", ""}[r.IntN(16)]
				if r.IntN(2) == 0 {
					lines[i] = string(rs[:p]) + ins + string(rs[p:])
				} else {
					lines[i] = string(rs[:p]) + ins + string(rs[p+1:])
				}
			}
		}
	}
	return strings.Join(lines, "\n")
}

// TestDecodeMalformedAgainstReference has both decoders judge mutated
// (mostly malformed) documents, 1500 by default or SKEIN_TOON_EXPLORE=N.
// In strict mode they must accept and reject exactly the same documents;
// in non-strict mode Go may accept more (spec §6 lets a malformed header
// fall through to a key-value line, which the 4.0 fixtures require and the
// reference does not do) but never less. Where both accept, the values
// must agree (compared at float64 precision, the reference's domain).
func TestDecodeMalformedAgainstReference(t *testing.T) {
	n := 1500
	if env := os.Getenv("SKEIN_TOON_EXPLORE"); env != "" {
		if _, err := fmt.Sscan(env, &n); err != nil || n <= 0 {
			t.Fatalf("SKEIN_TOON_EXPLORE=%q is not a positive number", env)
		}
	}
	g := newGen(31337)
	r := rand.New(rand.NewPCG(1, 2))
	var docs []string
	var strict []bool
	for len(docs) < n {
		b, _ := Encode(jsKeyOrder(g.value(0)), EncodeOptions{Delimiter: []Delimiter{Comma, Tab, Pipe}[r.IntN(3)]})
		docs = append(docs, mutate(r, string(b)))
		strict = append(strict, r.IntN(2) == 0)
	}
	reqs := make([]refRequest, len(docs))
	for i, d := range docs {
		reqs[i] = refRequest{Op: "decode", Input: d, Options: map[string]any{"strict": strict[i]}}
	}
	resp := runReference(t, reqs)
	var both, goOnly, refOnly, neither, differ int
	for i, d := range docs {
		v, err := DecodeString(d, DecodeOptions{NonStrict: !strict[i]})
		switch {
		case err == nil && resp[i].OK:
			both++
			rv, perr := ParseJSON(bytes.NewReader([]byte(resp[i].Out)))
			if perr != nil {
				t.Fatal(perr)
			}
			if !Equal(floatNumbers(jsKeyOrder(v)), floatNumbers(rv)) {
				differ++
				js, _ := appendJSON(nil, v)
				if differ <= 10 {
					t.Errorf("strict=%v values differ for %q\n  go: %s\n ref: %s", strict[i], d, js, resp[i].Out)
				}
			}
		case err == nil:
			goOnly++
			if strict[i] {
				t.Errorf("strict: only Go accepts %q (reference: %s)", d, resp[i].Error)
			}
		case resp[i].OK:
			refOnly++
			t.Errorf("strict=%v: only the reference accepts %q (go: %v)", strict[i], d, err)
		default:
			neither++
		}
	}
	t.Logf("%d mutated documents: both accept %d (values differ %d), only Go %d (non-strict header fall-through), only the reference %d, both reject %d",
		len(docs), both, differ, goOnly, refOnly, neither)
}

// floatNumbers rounds every number to float64, the reference's domain, so
// that the lossless Go decoder and the reference compare on what both can
// represent.
func floatNumbers(v any) any {
	switch x := v.(type) {
	case Number:
		f, err := x.Float64()
		if err != nil {
			return x
		}
		return floatNumber(f)
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = floatNumbers(x[i])
		}
		return out
	case *Object:
		out := NewObject(x.Len())
		for i, k := range x.keys {
			out.Set(k, floatNumbers(x.vals[i]))
		}
		return out
	}
	return v
}
