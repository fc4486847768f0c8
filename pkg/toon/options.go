package toon

import (
	"errors"
	"fmt"
)

// Delimiter separates inline array values and tabular cells.
type Delimiter byte

const (
	Comma Delimiter = ','
	Tab   Delimiter = '\t'
	Pipe  Delimiter = '|'
)

// ParseDelimiter accepts the names and the characters of the three
// delimiters, as a command line would pass them.
func ParseDelimiter(s string) (Delimiter, error) {
	switch s {
	case "", ",", "comma":
		return Comma, nil
	case "\t", "tab", `\t`:
		return Tab, nil
	case "|", "pipe":
		return Pipe, nil
	}
	return 0, fmt.Errorf("toon: unknown delimiter %q (want comma, tab or pipe)", s)
}

func (d Delimiter) String() string {
	switch d {
	case Comma:
		return "comma"
	case Tab:
		return "tab"
	case Pipe:
		return "pipe"
	}
	return fmt.Sprintf("Delimiter(%q)", byte(d))
}

// EncodeOptions are the encoder options of spec §13.
type EncodeOptions struct {
	// IndentSize is the number of spaces per level; 0 means 2.
	IndentSize int
	// Delimiter is the document delimiter; 0 means Comma.
	Delimiter Delimiter
	// MaxBytes bounds the document: encoding stops with ErrTooLarge as soon as it would grow
	// past it, so a caller pays for at most MaxBytes of output. Indentation makes a document's
	// size grow with its depth times its values (a few kilobytes of nested arrays are
	// megabytes of TOON). 0 means no bound.
	MaxBytes int
}

// ErrTooLarge is Encode's error when the document would exceed EncodeOptions.MaxBytes.
var ErrTooLarge = errors.New("toon: encode: document larger than MaxBytes")

// DecodeOptions are the decoder options of spec §13 plus safety limits.
type DecodeOptions struct {
	// IndentSize is the number of spaces per level; 0 means 2.
	IndentSize int
	// NonStrict turns strict mode off. Strict is the default so that the
	// zero value decodes as the specification requires.
	NonStrict bool
	// MaxDepth bounds the nesting depth of the decoded value; 0 means
	// DefaultMaxDepth. Deeper input is refused with ErrLimit.
	MaxDepth int
	// MaxLength bounds any declared [N]; 0 means DefaultMaxLength. The
	// decoder never allocates from a declared length, the limit only turns
	// absurd declarations into clear errors.
	MaxLength int
}

const (
	DefaultMaxDepth  = 1000
	DefaultMaxLength = 1 << 28
)

func (o EncodeOptions) norm() (EncodeOptions, error) {
	if o.IndentSize == 0 {
		o.IndentSize = 2
	}
	if o.IndentSize < 0 || o.IndentSize > 64 {
		return o, fmt.Errorf("toon: indent size %d out of range 1..64", o.IndentSize)
	}
	if o.MaxBytes < 0 {
		return o, fmt.Errorf("toon: MaxBytes %d is negative", o.MaxBytes)
	}
	if o.Delimiter == 0 {
		o.Delimiter = Comma
	}
	if o.Delimiter != Comma && o.Delimiter != Tab && o.Delimiter != Pipe {
		return o, fmt.Errorf("toon: invalid delimiter %q", byte(o.Delimiter))
	}
	return o, nil
}

func (o DecodeOptions) norm() (DecodeOptions, error) {
	if o.IndentSize == 0 {
		o.IndentSize = 2
	}
	if o.IndentSize < 0 || o.IndentSize > 64 {
		return o, fmt.Errorf("toon: indent size %d out of range 1..64", o.IndentSize)
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxLength <= 0 {
		o.MaxLength = DefaultMaxLength
	}
	return o, nil
}
