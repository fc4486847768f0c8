package toon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// JSONError is a malformed-JSON error with its 1-based position.
type JSONError struct {
	Line, Column int
	Msg          string
}

func (e *JSONError) Error() string {
	return fmt.Sprintf("json: line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// ParseJSONBytes is ParseJSON on a buffer, with errors that name the line
// and column.
func ParseJSONBytes(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := parseJSONValue(dec, 0)
	if err == nil {
		_, terr := dec.Token()
		switch {
		case terr == io.EOF:
			return v, nil
		case terr == nil:
			err = errors.New("unexpected content after the JSON value")
		default:
			err = terr
		}
	}
	// Decoder offsets are relative to its buffer; a whole-input validation
	// pass gives the absolute offset of the offending byte.
	off := len(b)
	msg := err.Error()
	var raw json.RawMessage
	var se *json.SyntaxError
	if verr := json.Unmarshal(b, &raw); errors.As(verr, &se) {
		off = int(se.Offset) - 1
		msg = se.Error()
	}
	line, col := position(b, off)
	return nil, &JSONError{Line: line, Column: col, Msg: msg}
}

func position(b []byte, off int) (line, col int) {
	if off > len(b) {
		off = len(b)
	}
	if off < 0 {
		off = 0
	}
	line = 1 + bytes.Count(b[:off], []byte{'\n'})
	start := bytes.LastIndexByte(b[:off], '\n') + 1
	return line, len([]rune(string(b[start:off]))) + 1
}

// EncodeJSON reads one JSON value from r and writes its TOON encoding to w
// (no trailing newline, as the specification requires of a document).
func EncodeJSON(r io.Reader, w io.Writer, opts EncodeOptions) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("toon: read input: %w", err)
	}
	v, err := ParseJSONBytes(b)
	if err != nil {
		return err
	}
	out, err := Encode(v, opts)
	if err != nil {
		return err
	}
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("toon: write output: %w", err)
	}
	return nil
}

// DecodeToJSON reads a TOON document from r and writes it to w as compact
// JSON followed by a newline, with key order and every digit of every
// number preserved.
func DecodeToJSON(r io.Reader, w io.Writer, opts DecodeOptions) error {
	v, err := Decode(r, opts)
	if err != nil {
		return err
	}
	out, err := appendJSON(nil, v)
	if err != nil {
		return err
	}
	out = append(out, '\n')
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("toon: write output: %w", err)
	}
	return nil
}
