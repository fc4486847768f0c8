package tokenize

import (
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// palette is every class of character the pre-tokenizer tells apart, with the ones that sit at
// the edges of its rules: contractions, a newline after a symbol, separators other than a space.
var palette = []string{
	"a", "z", "Q", "É", "ß", "e\u0301", "\u0301", "日", "語", "ｶ", "ʰ", "ǅ", "Ω",
	"0", "7", "٣", "½", "Ⅻ", "²",
	"'", "'s", "'T", "'re", "'ll", "’", "!", "?", ".", ",", "/", "-", "_", "{", "}", "[", "]", "\"", ":", "#", "$", "€", "😀", "\u200d",
	" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u2003", "\u2028", "\u0085", "\v", "\f",
	"<|endoftext|>", "http://x.org/a?b=1", "don't", "I'M", "x86_64", "3.14159",
}

func mixed(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(palette[r.Intn(len(palette))])
	}
	return b.String()
}

// cutEverywhere cuts s at every place boundary allows.
func cutEverywhere(s string) []string {
	var out []string
	start, prev := 0, rune(-1)
	for i, r := range s {
		if i > start && boundary(prev, r) {
			out = append(out, s[start:i])
			start = i
		}
		prev = r
	}
	return append(out, s[start:])
}

func encodePieces(pieces []string) []int {
	var ids []int
	for _, p := range pieces {
		ids = append(ids, encoder().EncodeOrdinary(p)...)
	}
	return ids
}

func sameIDs(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Every place boundary reports is one where the tokenizer's own output splits: the tokens of
// the pieces are the tokens of the whole, id for id.
func TestBoundaryIsWhereThePreTokenizerSplits(t *testing.T) {
	texts := []string{
		"Hello, world! It's 10:45 and Zoë's café (#3) serves \"crème brûlée\" for $4.50/each.\n\tNext: {\"k\":[1,2,3]}",
		"func main() {\n\tfmt.Println(\"x86_64\", 0x1F, 3.14e-10)\n}\n\n\n  // done  \r\n",
		"日本語のテキストと English mixed, 中文 123 ٣٤٥ and ½ cups; Ⅻ o'clock — don't, WE'LL, they're.",
		"a  b   c\t\td \n e\n\n f   \n\ng !!! ?? ... /// \n\n///x",
		"https://example.com/path/to/resource?query=value&x=1#frag user@example.org C:\\Windows\\x",
	}
	r := rand.New(rand.NewSource(23))
	for range 200 {
		texts = append(texts, mixed(r, 300))
	}
	for _, s := range texts {
		pieces := cutEverywhere(s)
		if got, want := encodePieces(pieces), encoder().EncodeOrdinary(s); !sameIDs(got, want) {
			t.Fatalf("cut at every boundary, %q gives %d tokens, whole %d (pieces %q)", s, len(got), len(want), pieces)
		}
	}
}

func FuzzBoundary(f *testing.F) {
	for _, s := range palette {
		f.Add(s + "x " + s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || len(s) > 2000 {
			t.Skip()
		}
		if got, want := encodePieces(cutEverywhere(s)), encoder().EncodeOrdinary(s); !sameIDs(got, want) {
			t.Fatalf("%q: cut at every boundary %v, whole %v", s, got, want)
		}
	})
}

// adversarial inputs are texts with long stretches the pre-tokenizer does not split, each of
// which took time quadratic in its length before segments.
func adversarial(n int) map[string]string {
	r := rand.New(rand.NewSource(int64(n)))
	var randomText strings.Builder
	for randomText.Len() < n {
		if c := rune(r.Intn(0x10FFFF)); utf8.ValidRune(c) {
			randomText.WriteRune(c)
		}
	}
	return map[string]string{
		"one letter":      strings.Repeat("a", n),
		"one capital":     strings.Repeat("A", n),
		"spaces":          strings.Repeat(" ", n) + "x",
		"newlines":        strings.Repeat("\n", n),
		"space newline":   strings.Repeat(" \n", n/2),
		"one symbol":      strings.Repeat("!", n),
		"digits":          strings.Repeat("7", n),
		"CJK":             strings.Repeat("日本語", n/9),
		"combining marks": "e" + strings.Repeat("\u0301", n/2),
		"deep JSON":       strings.Repeat(`{"a":[`, n/12) + strings.Repeat("]}", n/12),
		"random Unicode":  randomText.String(),
		"mixed":           mixed(r, n),
	}
}

// Segments cover the text, and none holds a stretch longer than maxRun with no boundary in it,
// nor is longer than maxSegment plus one such stretch: the tokenizer's quadratic parts work on
// pieces of bounded size whatever the input.
func TestSegmentsBoundTheWorkOfEachCall(t *testing.T) {
	for name, s := range adversarial(60_000) {
		var joined strings.Builder
		for seg := range segments(s) {
			joined.WriteString(seg)
			if len(seg) > maxSegment+maxRun+utf8.UTFMax {
				t.Fatalf("%s: a segment of %d bytes", name, len(seg))
			}
			last, prev := 0, rune(-1)
			for i, r := range seg {
				if i > 0 && boundary(prev, r) {
					last = i
				}
				if i-last > maxRun {
					t.Fatalf("%s: a segment holds %d bytes with no boundary", name, i-last)
				}
				prev = r
			}
		}
		if joined.String() != s {
			t.Fatalf("%s: segments do not add up to the text", name)
		}
	}
}

// Ordinary text, long enough to be cut into many segments, counts exactly.
func TestCountIsExactOnOrdinaryText(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	var b strings.Builder
	for b.Len() < 20*maxSegment {
		b.WriteString(mixed(r, 200))
		b.WriteString(" The quick brown fox's 3 jumps over the lazy dog.\n")
	}
	s := b.String()
	if got, want := count(s), len(encoder().EncodeOrdinary(s)); got != want {
		t.Fatalf("count %d, BPE over the whole text %d", got, want)
	}
}

// A run with no boundary is cut every maxRun bytes; each cut may cost a token or two, no more.
// With -v it prints how far each count is from BPE over the whole text (docs/benchmarks.md).
func TestCountOfLongRunsIsClose(t *testing.T) {
	texts := adversarial(6000)
	texts["one long word repeated"] = strings.Repeat("internationalization", 300)
	for _, name := range slices.Sorted(maps.Keys(texts)) {
		s := texts[name]
		exact := len(encoder().EncodeOrdinary(s))
		got := count(s)
		t.Logf("%-24s %5d bytes: %5d tokens, exact %5d (%+.1f%%)", name, len(s), got, exact, 100*float64(got-exact)/float64(exact))
		if slack := 2 * (len(s)/maxRun + 1); got < exact-slack || got > exact+slack {
			t.Errorf("%s: count %d, exact %d: off by more than two tokens per %d bytes", name, got, exact, maxRun)
		}
	}
}

func TestTruncateTokenizesOnlyTheHead(t *testing.T) {
	s := strings.Repeat("a", 1<<20)
	out, cut := Truncate(s, 10)
	if !cut || out == "" || !strings.HasPrefix(s, out) || Count(out) > 10 {
		t.Fatalf("Truncate of 1 MiB of one letter to 10 tokens: %d bytes, cut %v", len(out), cut)
	}
}
