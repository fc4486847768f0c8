// Package tokenize counts tokens with a real BPE tokenizer (o200k_base), loaded once from the
// vocabulary compiled into the binary: it never downloads anything at run time.
//
// The counts are exact for OpenAI's o200k models and a close estimate for other providers;
// the scripted model, the context budget and the miner use them so that token figures mean
// something offline.
package tokenize

import (
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
func Count(s string) int {
	if s == "" {
		return 0
	}
	return len(encoder().EncodeOrdinary(s))
}

// Truncate returns s cut to at most maxTokens tokens. The cut falls on a word boundary (the
// end of the last whole word that fits) so no word is split; if the first word alone is over
// the limit it is cut at the token boundary instead. The second result reports whether s was
// shortened. maxTokens <= 0 yields "".
func Truncate(s string, maxTokens int) (string, bool) {
	if maxTokens <= 0 {
		return "", s != ""
	}
	e := encoder()
	toks := e.EncodeOrdinary(s)
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
