package toon

import (
	"errors"
	"strings"
	"testing"
)

// Indentation makes nested arrays grow with depth times values: 4 KB of JSON is 4 MB of TOON.
// MaxBytes stops the encoder there instead of after; under it the output is what it would be.
func TestEncodeMaxBytes(t *testing.T) {
	deep, err := ParseJSONBytes([]byte(strings.Repeat("[", 2000) + strings.Repeat("]", 2000)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Encode(deep, EncodeOptions{MaxBytes: 64 << 10}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("2000 nested arrays under a 64 KiB bound: %v, want ErrTooLarge", err)
	}
	doc, err := ParseJSONBytes([]byte(`{"users":[{"id":1,"name":"Ada"},{"id":2,"name":"Bob"}],"tags":["a","b"],"deep":{"x":{"y":[1,{"z":2}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Encode(doc, EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Encode(doc, EncodeOptions{MaxBytes: len(whole)}); err != nil || string(got) != string(whole) {
		t.Fatalf("bound equal to the size: %q, %v; want the document", got, err)
	}
	if _, err := Encode(doc, EncodeOptions{MaxBytes: len(whole) - 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("bound one byte under the size: %v, want ErrTooLarge", err)
	}
	if _, err := Encode(doc, EncodeOptions{MaxBytes: -1}); err == nil || errors.Is(err, ErrTooLarge) {
		t.Fatalf("negative bound: %v, want an options error", err)
	}
}
