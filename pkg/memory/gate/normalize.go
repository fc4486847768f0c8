package gate

import (
	"strings"
	"unicode"

	"go.mau.fi/util/confusable"
	"golang.org/x/text/unicode/norm"
)

// Normalize is the form in which text enters memory: Unicode NFKC (fullwidth and styled letters
// become plain ones), format and control characters removed (zero-width spaces and joiners,
// bidi overrides and isolates, the BOM, soft hyphens), whitespace collapsed to single spaces,
// and inside a word that mixes Latin letters with letters of another script, each letter the
// Unicode confusables table (TR39) maps to a Latin one replaced by it: "ЅYSTEM" (a Cyrillic
// Ѕ) is stored as "SYSTEM", so what a reviewer reads is what the rules and the model read.
// Words wholly in another script are kept as written. It is idempotent.
func Normalize(text string) string {
	text = norm.NFKC.String(text)
	text = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.Is(unicode.Cf, r) || unicode.IsControl(r) || invisible(r):
			return -1
		}
		return r
	}, text)
	text = strings.Join(strings.Fields(text), " ")
	return foldMixedScript(text)
}

// invisible reports letters that render as nothing but are not format characters (the Hangul
// fillers, the braille blank), which hide text from a reviewer as zero-width spaces do.
func invisible(r rune) bool {
	switch r {
	case 0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800, 0x180E:
		return true
	}
	return false
}

// foldMixedScript replaces, inside words that mix Latin with another script, the letters that are
// confusable with a Latin letter by that letter.
func foldMixedScript(text string) string {
	var b strings.Builder
	b.Grow(len(text))
	word := make([]rune, 0, 32)
	flush := func() {
		if mixed(word) {
			for _, r := range word {
				b.WriteString(latinFor(r))
			}
		} else {
			b.WriteString(string(word))
		}
		word = word[:0]
	}
	for _, r := range text {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) {
			word = append(word, r)
			continue
		}
		flush()
		b.WriteRune(r)
	}
	flush()
	return b.String()
}

func mixed(word []rune) bool {
	latin, other := false, false
	for _, r := range word {
		switch {
		case unicode.Is(unicode.Latin, r):
			latin = true
		case unicode.IsLetter(r):
			other = true
		}
	}
	return latin && other
}

// latinFor is r's Latin look-alike when the confusables table maps r to one ASCII letter.
func latinFor(r rune) string {
	if r < 0x80 || !unicode.IsLetter(r) {
		return string(r)
	}
	repl := confusable.GetReplacement(r)
	if len(repl) == 1 && (repl[0] >= 'a' && repl[0] <= 'z' || repl[0] >= 'A' && repl[0] <= 'Z') {
		return repl
	}
	return string(r)
}

// Fold is the form the rules compare: Normalize, lower case, then the TR39 confusable skeleton
// (lower-cased again), so "ЅYSTEM", "ｓｙｓｔｅｍ" and "sуstem" (a Cyrillic у) all fold to what
// "system" folds to. A skeleton is for comparison only (it maps "m" to "rn"); nothing shows it.
func Fold(text string) string {
	return strings.ToLower(confusable.Skeleton(strings.ToLower(Normalize(text))))
}
