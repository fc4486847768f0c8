package tokenize

import (
	"iter"
	"unicode"
)

// maxRun is the longest stretch of text given to the tokenizer with no place where the
// pre-tokenizer would split it. Work per byte grows with it (BPE and the regular expression's
// backtracking are quadratic within such a stretch), and so does the count's accuracy on
// unbroken runs: at 64 bytes, 60 KB of one letter costs a few milliseconds, and a cut in a
// run of real tokens (eight-letter "aaaaaaaa" tokens, two-byte "\n " tokens) mostly falls on a
// token edge.
const maxRun = 128

// maxSegment is how much text is tokenized in one call when it can be cut exactly: long enough
// that the per-call setup is noise, short enough that a segment holds no run over maxRun.
const maxSegment = 2048

// segments cuts s into pieces that can be tokenized on their own. Each cut is at a pre-token
// boundary of o200k_base (see boundary), so the tokens of the pieces are the tokens of s,
// except where a stretch of maxRun bytes holds no boundary: there s is cut anyway, on a
// character edge, which bounds the work per byte.
func segments(s string) iter.Seq[string] {
	return func(yield func(string) bool) {
		start, last := 0, 0 // last: the latest boundary (or cut) at or after start
		prev := rune(-1)
		for i, r := range s {
			switch {
			case i > start && boundary(prev, r):
				if i-start >= maxSegment {
					if !yield(s[start:i]) {
						return
					}
					start = i
				}
				last = i
			case i-last >= maxRun:
				if !yield(s[start:i]) {
					return
				}
				start, last = i, i
			}
			prev = r
		}
		if start < len(s) {
			yield(s[start:])
		}
	}
}

// boundary reports whether the o200k_base pre-tokenizer always splits between prev and r:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// No piece holds a number and anything else; a piece with a letter ends at the last letter or
// mark that follows it, or at an ASCII contraction ('s, 't, ...); a piece that is not
// whitespace never goes on into a space or a tab. Whitespace is never followed by a boundary:
// where its run ends depends on what follows (\s+(?!\S)). A mark is no help either: it joins
// letters and symbols alike. The pattern has no look-behind, so the pieces after a boundary do
// not depend on the text before it.
func boundary(prev, r rune) bool {
	if isSpace(prev) {
		return false
	}
	if unicode.IsNumber(prev) != unicode.IsNumber(r) {
		return true
	}
	if unicode.IsLetter(prev) && !unicode.IsLetter(r) && !unicode.IsMark(r) && r != '\'' {
		return true
	}
	return r == ' ' || r == '\t'
}

// isSpace is \s of the pattern (.NET's): Go's White_Space plus the separator category.
func isSpace(r rune) bool { return unicode.IsSpace(r) || unicode.Is(unicode.Z, r) }
