// Package tokenize counts tokens with a real BPE tokenizer (o200k_base), loaded once from the
// vocabulary compiled into the binary: it never downloads anything at run time.
//
// The counts are exact for OpenAI's o200k models and a close estimate for other providers;
// the scripted model, the context budget and the miner use them so that token figures mean
// something offline.
//
// Work is linear in the text: it is cut into segments (segment.go) before BPE, because BPE and
// the pre-tokenizer's backtracking are quadratic in the length of one run of text with no break
// (60 KB of one letter took 40 s of CPU; cut, it takes milliseconds). A cut falls where the
// o200k pre-tokenizer would split anyway, so counts stay exact, except inside a run of more than
// maxRun bytes with no such place (one letter, space or symbol repeated, a CJK run, a long
// hash-like word): there a cut may add or save about one token per maxRun bytes.
package tokenize

import (
	"hash/maphash"
	"strings"
	"sync"
	"unicode"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding is the BPE vocabulary used for every count.
const Encoding = "o200k_base"

var (
	once    sync.Once
	enc     *tiktoken.Tiktoken
	loadErr error
)

func encoder() *tiktoken.Tiktoken {
	once.Do(func() {
		// The offline loader reads the vocabulary embedded in the loader module, so a machine
		// without network access (CI, an air-gapped host) counts exactly like any other.
		tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
		enc, loadErr = tiktoken.GetEncoding(Encoding)
	})
	if loadErr != nil {
		// The vocabulary is compiled in; failing to parse it is a build defect, not a runtime
		// condition a caller could handle.
		panic("tokenize: loading " + Encoding + ": " + loadErr.Error())
	}
	return enc
}

// Count returns the number of tokens in s. Special-token text (e.g. "<|endoftext|>") is
// counted as ordinary text, as it would be when it appears inside a prompt.
//
// Counts of longer texts are remembered (by a 64-bit hash and the length, not the text), so a
// transcript's messages, re-sent every model turn, are tokenized once: hashing is far cheaper
// than BPE.
func Count(s string) int {
	if s == "" {
		return 0
	}
	if len(s) < memoMinLen {
		return len(encoder().EncodeOrdinary(s))
	}
	k := memoKey{hashOf(s), len(s)}
	if n, ok := memo.get(k); ok {
		return n
	}
	n := count(s)
	memo.put(k, n)
	return n
}

func count(s string) int {
	e := encoder()
	n := 0
	for seg := range segments(s) {
		n += len(e.EncodeOrdinary(seg))
	}
	return n
}

// memoMinLen is the shortest text whose count is remembered: below it BPE costs about what a
// lookup does.
const memoMinLen = 8

// memoEntries bounds the remembered counts per generation (two generations are kept).
const memoEntries = 1 << 15

var (
	seed = maphash.MakeSeed()
	memo = &countMemo{cur: map[memoKey]int{}}
)

func hashOf(s string) uint64 { return maphash.String(seed, s) }

type memoKey struct {
	h uint64
	n int
}

// countMemo is a two-generation cache: when the current generation is full it becomes the old
// one, so recently used counts survive and memory stays bounded at 2×memoEntries entries.
type countMemo struct {
	mu       sync.Mutex
	cur, old map[memoKey]int
}

func (m *countMemo) get(k memoKey) (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, ok := m.cur[k]; ok {
		return n, true
	}
	if n, ok := m.old[k]; ok {
		m.putLocked(k, n)
		return n, true
	}
	return 0, false
}

func (m *countMemo) put(k memoKey, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.putLocked(k, n)
}

func (m *countMemo) putLocked(k memoKey, n int) {
	if len(m.cur) >= memoEntries {
		m.old, m.cur = m.cur, make(map[memoKey]int, memoEntries/4)
	}
	m.cur[k] = n
}

// Truncate returns s cut to at most maxTokens tokens. The cut falls on a word boundary (the
// end of the last whole word that fits) so no word is split; if the first word alone is over
// the limit it is cut at the token boundary instead. The second result reports whether s was
// shortened. maxTokens <= 0 yields "". Only the head of s that is kept is tokenized (plus at
// most one segment), so cutting a megabyte to a few tokens costs what the few tokens do.
func Truncate(s string, maxTokens int) (string, bool) {
	if maxTokens <= 0 {
		return "", s != ""
	}
	e := encoder()
	var toks []int
	for seg := range segments(s) {
		toks = append(toks, e.EncodeOrdinary(seg)...)
		if len(toks) > maxTokens {
			break
		}
	}
	if len(toks) <= maxTokens {
		return s, false
	}
	prefix := e.Decode(toks[:maxTokens])
	// A token may end inside a multi-byte rune; drop any broken tail.
	prefix = strings.ToValidUTF8(prefix, "")
	prefix = strings.TrimRight(prefix, "\uFFFD")
	if !strings.HasPrefix(s, prefix) {
		return prefix, true
	}
	// If the text continues with a letter, the last word was cut: back up to the last space.
	rest := s[len(prefix):]
	if rest != "" && !startsWithSpace(rest) {
		if i := strings.LastIndexFunc(prefix, unicode.IsSpace); i > 0 {
			prefix = prefix[:i]
		}
	}
	return strings.TrimRightFunc(prefix, unicode.IsSpace), true
}

func startsWithSpace(s string) bool {
	for _, r := range s {
		return unicode.IsSpace(r)
	}
	return false
}
