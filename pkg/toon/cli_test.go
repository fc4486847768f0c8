package toon

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestEncodeJSONDecodeToJSON(t *testing.T) {
	in := `{"users":[{"id":1,"name":"Ada","tags":["a","b"]},{"id":2,"name":"Bob","tags":[]}],"n":1.50,"big":12345678901234567890}`
	var toonOut bytes.Buffer
	if err := EncodeJSON(strings.NewReader(in), &toonOut, EncodeOptions{Delimiter: Pipe, IndentSize: 4}); err != nil {
		t.Fatal(err)
	}
	want := "users[2|]:\n    - id: 1\n        name: Ada\n        tags[2|]: a|b\n    - id: 2\n        name: Bob\n        tags: []\nn: 1.5\nbig: 12345678901234567890"
	if toonOut.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", toonOut.String(), want)
	}
	var jsonOut bytes.Buffer
	if err := DecodeToJSON(&toonOut, &jsonOut, DecodeOptions{IndentSize: 4}); err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"users":[{"id":1,"name":"Ada","tags":["a","b"]},{"id":2,"name":"Bob","tags":[]}],"n":1.5,"big":12345678901234567890}` + "\n"
	if jsonOut.String() != wantJSON {
		t.Fatalf("got %s", jsonOut.String())
	}
}

func TestCLIErrorsNamePositions(t *testing.T) {
	err := EncodeJSON(strings.NewReader("{\n  \"a\": 1,\n  \"b\": tru\n}"), &bytes.Buffer{}, EncodeOptions{})
	var je *JSONError
	if !errors.As(err, &je) || je.Line != 3 || je.Column != 11 {
		t.Fatalf("want a JSONError on line 3, got %v", err)
	}
	err = EncodeJSON(strings.NewReader(`{"a": [1, 2`), &bytes.Buffer{}, EncodeOptions{})
	if !errors.As(err, &je) || je.Line != 1 {
		t.Fatalf("truncated JSON: got %v", err)
	}
	err = DecodeToJSON(strings.NewReader("a: 1\nb[2]: x"), &bytes.Buffer{}, DecodeOptions{})
	var se *SyntaxError
	if !errors.As(err, &se) || se.Line != 2 || se.Kind != ErrCount {
		t.Fatalf("want a count error on line 2, got %v", err)
	}
	if err := DecodeToJSON(strings.NewReader("a: 1\nb[2]: x"), &bytes.Buffer{}, DecodeOptions{NonStrict: true}); err != nil {
		t.Fatalf("non-strict: %v", err)
	}
}
