package toon

import "fmt"

// ErrorKind classifies decode errors by the specification's error classes
// (spec §14), so callers and tests can tell them apart without parsing text.
type ErrorKind int

const (
	// ErrSyntax is any other malformed input: missing colons, stray scalar
	// lines, a document that is neither object, array nor primitive.
	ErrSyntax ErrorKind = iota
	// ErrCount: an array's or keyed object's item count differs from [N].
	ErrCount
	// ErrWidth: a tabular or entry row has a cell count other than the
	// header's leaf-field count.
	ErrWidth
	// ErrIndent: leading spaces not a multiple of the indent size, or tabs
	// used as indentation.
	ErrIndent
	// ErrDepthJump: a line more than one level deeper than its scope.
	ErrDepthJump
	// ErrOverIndent: a line deeper than the content depth of a scope that
	// did not open.
	ErrOverIndent
	// ErrBlankLine: a blank line inside an array span.
	ErrBlankLine
	// ErrDuplicateKey: two sibling keys with the same literal text.
	ErrDuplicateKey
	// ErrHeader: a malformed array or keyed header (length, delimiter,
	// fields segment, misplaced keyless header, content after the colon).
	ErrHeader
	// ErrString: an invalid escape sequence or unterminated quoted token.
	ErrString
	// ErrTrailing: content after a completed root array or keyed root
	// object.
	ErrTrailing
	// ErrUTF8: ill-formed UTF-8 in the input.
	ErrUTF8
	// ErrLimit: the input exceeds a configured safety limit (nesting depth,
	// declared length, input size).
	ErrLimit
)

var kindNames = [...]string{
	ErrSyntax:       "syntax",
	ErrCount:        "count mismatch",
	ErrWidth:        "row width mismatch",
	ErrIndent:       "indentation",
	ErrDepthJump:    "depth jump",
	ErrOverIndent:   "over-indented line",
	ErrBlankLine:    "blank line in array",
	ErrDuplicateKey: "duplicate key",
	ErrHeader:       "malformed header",
	ErrString:       "invalid string",
	ErrTrailing:     "trailing content",
	ErrUTF8:         "invalid UTF-8",
	ErrLimit:        "limit exceeded",
}

func (k ErrorKind) String() string {
	if int(k) >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// SyntaxError is returned by the decoder. Line and Column are 1-based;
// Column counts Unicode code points from the start of the raw line.
type SyntaxError struct {
	Kind   ErrorKind
	Line   int
	Column int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("toon: line %d, column %d: %s: %s", e.Line, e.Column, e.Kind, e.Msg)
}
