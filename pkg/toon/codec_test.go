package toon

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestErrorsNameLineAndColumn(t *testing.T) {
	cases := []struct {
		doc       string
		opts      DecodeOptions
		kind      ErrorKind
		line, col int
	}{
		{doc: "a: 1\nb: \"bad\\x\"", kind: ErrString, line: 2, col: 8},
		{doc: "é: 1\nü: \"\\q\"", kind: ErrString, line: 2, col: 5},
		{doc: "items[3]: a,b", kind: ErrCount, line: 1, col: 11},
		{doc: "a:\n   b: 1", kind: ErrIndent, line: 2, col: 4},
		{doc: "\ta: 1", kind: ErrIndent, line: 1, col: 1},
		{doc: "a: 1\na: 2", kind: ErrDuplicateKey, line: 2, col: 1},
		{doc: "x\ny", kind: ErrSyntax, line: 2, col: 1},
		{doc: "[1]: x\ny: 2", kind: ErrTrailing, line: 2, col: 1},
		{doc: "a:\n    b: 1", kind: ErrDepthJump, line: 2, col: 5},
		{doc: "a: 1\n  b: 2", kind: ErrOverIndent, line: 2, col: 3},
		{doc: "a[2]:\n  - 1\n\n  - 2", kind: ErrBlankLine, line: 3, col: 1},
		{doc: "a[1]{b,c}:\n  1", kind: ErrWidth, line: 2, col: 3},
		{doc: "a[03]: 1", kind: ErrHeader, line: 1, col: 3},
		{doc: "a[2|]{b,c}:\n  1|2\n  3|4", kind: ErrHeader, line: 1, col: 6},
		{doc: "a: ok\nb: \xff", kind: ErrUTF8, line: 2, col: 4},
		{doc: "a[1]{b,b}:\n  1,2", kind: ErrDuplicateKey, line: 1, col: 5},
		{doc: "k: \"\\ud83d\\ude00\"", kind: ErrString, line: 1, col: 5},
		{doc: "a[1]:\n  - x\nb[2]: 1", kind: ErrCount, line: 3, col: 7},
	}
	for _, c := range cases {
		_, err := DecodeString(c.doc, c.opts)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%q: want a *SyntaxError, got %v", c.doc, err)
			continue
		}
		if se.Kind != c.kind || se.Line != c.line || se.Column != c.col {
			t.Errorf("%q: got %v (kind %v, line %d, col %d), want kind %v line %d col %d",
				c.doc, err, se.Kind, se.Line, se.Column, c.kind, c.line, c.col)
		}
		if !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), "column ") {
			t.Errorf("%q: message %q does not name line and column", c.doc, err)
		}
	}
}

func TestNonStrictLeniency(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"a: 1\na: 2\nb: 3", `{"a":2,"b":3}`},
		{"a:\n   b: 1", `{"a":{"b":1}}`},
		{"a[2]:\n  - 1\n\n  - 2", `{"a":[1,2]}`},
		{"a[3]: x,y", `{"a":["x","y"]}`},
		{"a[]: 1,2", `{"a[]":"1,2"}`},
		{"b: \xff", "{\"b\":\"\ufffd\"}"},
		{"a:\n\tb: 1", `{"a":{"b":1}}`},
	}
	for _, c := range cases {
		v, err := DecodeString(c.doc, DecodeOptions{NonStrict: true})
		if err != nil {
			t.Errorf("%q: %v", c.doc, err)
			continue
		}
		got, _ := appendJSON(nil, v)
		if string(got) != c.want {
			t.Errorf("%q: got %s, want %s", c.doc, got, c.want)
		}
	}
}

func TestLimitsRefuseDeepNestingAndHugeLengths(t *testing.T) {
	deep := nestedDoc(DefaultMaxDepth + 50)
	if _, err := DecodeString(deep, DecodeOptions{}); !isKind(err, ErrLimit) {
		t.Errorf("deep object nesting: want ErrLimit, got %v", err)
	}
	var lists strings.Builder
	for i := 0; i < 300; i++ {
		lists.WriteString(strings.Repeat("  ", i))
		if i > 0 {
			lists.WriteString("- ")
		}
		lists.WriteString("[1]:\n")
	}
	if _, err := DecodeString(lists.String(), DecodeOptions{MaxDepth: 100}); !isKind(err, ErrLimit) {
		t.Errorf("deep list nesting: want ErrLimit, got %v", err)
	}
	for _, doc := range []string{"a[99999999999999999999]: 1", "a[268435457]{x}:\n  1", "[1000000]: 1"} {
		if _, err := DecodeString(doc, DecodeOptions{MaxLength: 1000}); !isKind(err, ErrLimit) {
			t.Errorf("%q: want ErrLimit, got %v", doc, err)
		}
	}
	// A large but allowed declaration is a count mismatch, not an
	// allocation: the decoder never sizes anything from [N].
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := DecodeString("[200000000]:\n  - 1", DecodeOptions{}); !isKind(err, ErrCount) {
			t.Fatalf("want ErrCount, got %v", err)
		}
	})
	if allocs > 50 {
		t.Errorf("decoding a huge declared length made %v allocations", allocs)
	}
}

func isKind(err error, k ErrorKind) bool {
	var se *SyntaxError
	return errors.As(err, &se) && se.Kind == k
}

func TestCanonicalNumbers(t *testing.T) {
	cases := map[string]string{
		"0": "0", "-0": "0", "-0.0e5": "0", "1.5000": "1.5", "1.0": "1", "-1E+03": "-1000", "1e6": "1000000",
		"1e-6": "0.000001", "1e-7": "1e-7", "1e21": "1e+21", "123456789012345678901234567890": "1.2345678901234567890123456789e+29",
		"0.000123": "0.000123", "12345.678e-2": "123.45678", "9007199254740993": "9007199254740993",
		"1.5e300": "1.5e+300", "100e-2": "1", "-12.50": "-12.5",
	}
	for in, want := range cases {
		got, ok := Canonical(in)
		if !ok || got != want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "+1", ".5", "1.", "0x10", "1e", "--1", "1_0"} {
		if _, ok := Canonical(bad); ok {
			t.Errorf("Canonical(%q) accepted an invalid number", bad)
		}
	}
	// Floats encode with the shortest round-trip digits.
	tenth, fifth := 0.1, 0.2
	for f, want := range map[float64]string{tenth + fifth: "0.30000000000000004", 1e21: "1e+21", 5e-324: "5e-324", -1.5: "-1.5", math.Copysign(0, -1): "0"} {
		if got := floatNumber(f); got != Number(want) {
			t.Errorf("floatNumber(%v) = %v, want %s", f, got, want)
		}
	}
	if floatNumber(math.NaN()) != nil || floatNumber(math.Inf(1)) != nil {
		t.Error("NaN and infinities must encode as null")
	}
}

func TestDecodedNumbersAreExact(t *testing.T) {
	v, err := DecodeString("big: 98765432109876543210\nhuge: 123456789012345678901234567890\nsmall: 1.0000000000000000000001\nz: 05", DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*Object)
	if got, _ := o.Get("big"); got != Number("98765432109876543210") {
		t.Errorf("big = %v", got)
	}
	if got, _ := o.Get("huge"); got != Number("1.2345678901234567890123456789e+29") {
		t.Errorf("huge = %v (every digit must survive, in exponent form past 1e21)", got)
	}
	if got, _ := o.Get("small"); got != Number("1.0000000000000000000001") {
		t.Errorf("small = %v", got)
	}
	if got, _ := o.Get("z"); got != "05" {
		t.Errorf("leading-zero token must stay a string, got %#v", got)
	}
}

func TestPrototypeKeysAreOrdinary(t *testing.T) {
	doc := "__proto__: 1\nconstructor:\n  prototype: x\nrows[1]{__proto__,constructor}:\n  a,b"
	v, err := DecodeString(doc, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := appendJSON(nil, v)
	want := `{"__proto__":1,"constructor":{"prototype":"x"},"rows":[{"__proto__":"a","constructor":"b"}]}`
	if string(js) != want {
		t.Fatalf("got %s", js)
	}
	out, err := Encode(v, EncodeOptions{})
	if err != nil || string(out) != doc {
		t.Fatalf("re-encode: %q, %v", out, err)
	}
}

func TestMarshalGoValuesAndUnmarshal(t *testing.T) {
	type user struct {
		ID    int      `json:"id"`
		Name  string   `json:"name"`
		Roles []string `json:"roles,omitempty"`
	}
	in := map[string]any{
		"users": []user{{1, "Ada", []string{"admin"}}, {2, "Bob", nil}},
		"count": 2,
		"ratio": 0.5,
		"nan":   math.NaN(),
	}
	out, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := "count: 2\nnan: null\nratio: 0.5\nusers[2]:\n  - id: 1\n    name: Ada\n    roles[1]: admin\n  - id: 2\n    name: Bob"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	var back struct {
		Count int    `json:"count"`
		Users []user `json:"users"`
	}
	if err := Unmarshal(out, &back, DecodeOptions{}); err != nil {
		t.Fatal(err)
	}
	if back.Count != 2 || len(back.Users) != 2 || back.Users[0].Roles[0] != "admin" || back.Users[1].Name != "Bob" {
		t.Fatalf("unmarshal: %+v", back)
	}
	var anyv any
	if err := Unmarshal([]byte("a[2]: 1,x"), &anyv, DecodeOptions{}); err != nil {
		t.Fatal(err)
	}
	if m := anyv.(map[string]any); m["a"].([]any)[0] != 1.0 {
		t.Fatalf("any: %#v", anyv)
	}
}

func TestObjectOrderAndLWWPosition(t *testing.T) {
	v, err := DecodeString("z: 1\na: 2\nz: 3", DecodeOptions{NonStrict: true})
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*Object)
	if k := o.Keys(); len(k) != 2 || k[0] != "z" || k[1] != "a" {
		t.Fatalf("keys %v", k)
	}
	if z, _ := o.Get("z"); z != Number("3") {
		t.Fatalf("z = %v", z)
	}
	big := NewObject(0)
	for i := 0; i < 100; i++ {
		big.Set(strings.Repeat("k", i+1), i)
	}
	big.Set("kkk", "replaced")
	if v, _ := big.Get("kkk"); v != "replaced" || big.Len() != 100 || big.Keys()[2] != "kkk" {
		t.Fatal("indexed Set must replace in place")
	}
}

func TestCRLFCommentsAndBOM(t *testing.T) {
	v, err := DecodeString("\ufeff# header comment\r\na: 1\r\n  # nested comment\r\nb[2]: x,y\r\n", DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := appendJSON(nil, v)
	if string(js) != `{"a":1,"b":["x","y"]}` {
		t.Fatalf("got %s", js)
	}
}

func TestDeepNestedFieldGroups(t *testing.T) {
	const depth = 500
	doc := "a[1]{" + strings.Repeat("b{", depth) + "c" + strings.Repeat("}", depth) + "}:\n  1"
	v, err := DecodeString(doc, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur := v.(*Object)
	arr, _ := cur.Get("a")
	cur = arr.([]any)[0].(*Object)
	for i := 0; i < depth; i++ {
		next, ok := cur.Get("b")
		if !ok {
			t.Fatalf("level %d: no b", i)
		}
		cur = next.(*Object)
	}
	if c, _ := cur.Get("c"); c != Number("1") {
		t.Fatalf("leaf = %v", c)
	}
	out, err := Encode(v, EncodeOptions{})
	if err != nil || string(out) != doc {
		t.Fatalf("re-encode differs: %v", err)
	}
	tooDeep := "a[1]{" + strings.Repeat("b{", DefaultMaxDepth+1) + "c" + strings.Repeat("}", DefaultMaxDepth+1) + "}:\n  1"
	if _, err := DecodeString(tooDeep, DecodeOptions{}); !isKind(err, ErrHeader) {
		t.Fatalf("over-deep field groups: want ErrHeader, got %v", err)
	}
}
