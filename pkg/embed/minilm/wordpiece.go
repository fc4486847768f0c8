package minilm

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// wordPiece is the model's tokenizer (tokenizer.json: BertNormalizer with lowercase and
// Chinese-character splitting, BertPreTokenizer, WordPiece with "##" continuations, then
// [CLS] … [SEP]), written for this one configuration. It does what Hugging Face tokenizers does
// for it at a fraction of the general Go port's cost (that port spent 7 ms of CPU and 84k
// allocations on 32 short sentences, as much as ~4% of the model run).
// It holds no mutable state: safe for concurrent use.
type wordPiece struct {
	vocab    map[string]int32
	unk      int32
	cls, sep int32
	maxChars int
	maxLen   int      // ids per text, [CLS] and [SEP] included
	added    []string // special tokens matched verbatim in the raw text
	addedID  []int32
}

func loadWordPiece(path string, maxLen int) (*wordPiece, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		AddedTokens []struct {
			ID      int32  `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Normalizer struct {
			Type               string `json:"type"`
			CleanText          bool   `json:"clean_text"`
			HandleChineseChars bool   `json:"handle_chinese_chars"`
			StripAccents       *bool  `json:"strip_accents"`
			Lowercase          bool   `json:"lowercase"`
		} `json:"normalizer"`
		PreTokenizer struct {
			Type string `json:"type"`
		} `json:"pre_tokenizer"`
		Model struct {
			Type                    string           `json:"type"`
			UnkToken                string           `json:"unk_token"`
			ContinuingSubwordPrefix string           `json:"continuing_subword_prefix"`
			MaxInputCharsPerWord    int              `json:"max_input_chars_per_word"`
			Vocab                   map[string]int32 `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	n, m := f.Normalizer, f.Model
	if n.Type != "BertNormalizer" || !n.CleanText || !n.HandleChineseChars || !n.Lowercase || (n.StripAccents != nil && !*n.StripAccents) ||
		f.PreTokenizer.Type != "BertPreTokenizer" || m.Type != "WordPiece" || m.ContinuingSubwordPrefix != "##" {
		return nil, fmt.Errorf("%s is not the uncased BERT WordPiece configuration of all-MiniLM-L6-v2", path)
	}
	w := &wordPiece{vocab: m.Vocab, maxChars: m.MaxInputCharsPerWord, maxLen: maxLen}
	var ok [3]bool
	w.unk, ok[0] = m.Vocab[m.UnkToken]
	w.cls, ok[1] = m.Vocab["[CLS]"]
	w.sep, ok[2] = m.Vocab["[SEP]"]
	if ok != [3]bool{true, true, true} {
		return nil, fmt.Errorf("%s: vocabulary lacks [UNK], [CLS] or [SEP]", path)
	}
	if w.maxChars <= 0 {
		w.maxChars = 100
	}
	for _, a := range f.AddedTokens {
		w.added = append(w.added, a.Content)
		w.addedID = append(w.addedID, a.ID)
	}
	return w, nil
}

// encode returns the ids of text with [CLS] and [SEP], truncated to maxLen.
func (w *wordPiece) encode(text string) []int {
	ids := make([]int, 1, 32)
	ids[0] = int(w.cls)
	limit := w.maxLen - 1
	var buf []byte
	for text != "" && len(ids) < limit {
		// Added (special) tokens are matched in the raw text before anything else.
		at, which := len(text), -1
		if strings.IndexByte(text, '[') >= 0 {
			for k, a := range w.added {
				if i := strings.Index(text, a); i >= 0 && i < at {
					at, which = i, k
				}
			}
		}
		buf = w.normalize(buf[:0], text[:at])
		ids = w.words(ids, buf, limit)
		if which < 0 {
			break
		}
		if len(ids) < limit {
			ids = append(ids, int(w.addedID[which]))
		}
		text = text[at+len(w.added[which]):]
	}
	return append(ids, int(w.sep))
}

// normalize appends BertNormalizer's output for s to dst: control characters dropped,
// whitespace made a space, CJK ideographs surrounded by spaces, accents stripped, lowercased.
func (w *wordPiece) normalize(dst []byte, s string) []byte {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c == '\t' || c == '\n' || c == '\r' || c == ' ':
				c = ' '
			case c < 0x20 || c == 0x7f:
				continue
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			}
			dst = append(dst, c)
		}
		return dst
	}
	var clean []rune
	for _, r := range s {
		switch {
		case r == 0 || r == utf8.RuneError || isControl(r):
		case isWhitespace(r):
			clean = append(clean, ' ')
		case isCJK(r):
			clean = append(clean, ' ', r, ' ')
		default:
			clean = append(clean, r)
		}
	}
	for _, r := range norm.NFD.String(string(clean)) {
		if unicode.Is(unicode.Mn, r) {
			continue
		}
		dst = utf8.AppendRune(dst, unicode.ToLower(r))
	}
	return dst
}

// words splits normalized text on whitespace and punctuation and appends each word's pieces.
func (w *wordPiece) words(ids []int, s []byte, limit int) []int {
	var piece []byte
	for i := 0; i < len(s) && len(ids) < limit; {
		r, n := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRune(s[i:])
		}
		if r == ' ' || (r >= utf8.RuneSelf && unicode.IsSpace(r)) {
			i += n
			continue
		}
		if isPunct(r) {
			ids = w.word(ids, s[i:i+n], &piece)
			i += n
			continue
		}
		j := i + n
		for j < len(s) {
			r, m := rune(s[j]), 1
			if r >= utf8.RuneSelf {
				r, m = utf8.DecodeRune(s[j:])
			}
			if r == ' ' || (r >= utf8.RuneSelf && unicode.IsSpace(r)) || isPunct(r) {
				break
			}
			j += m
		}
		ids = w.word(ids, s[i:j], &piece)
		i = j
	}
	if len(ids) > limit {
		ids = ids[:limit]
	}
	return ids
}

// word appends the WordPiece ids of one word: greedy longest match from the left, "##" before
// every piece but the first, [UNK] for the whole word when some part matches nothing.
func (w *wordPiece) word(ids []int, word []byte, piece *[]byte) []int {
	if utf8.RuneCount(word) > w.maxChars {
		return append(ids, int(w.unk))
	}
	start := len(ids)
	for b := 0; b < len(word); {
		p := (*piece)[:0]
		if b > 0 {
			p = append(p, '#', '#')
		}
		pre := len(p)
		p = append(p, word[b:]...)
		found := false
		for e := len(word); e > b; {
			if id, ok := w.vocab[string(p[:pre+e-b])]; ok {
				ids = append(ids, int(id))
				b, found = e, true
				break
			}
			// back off one character
			e--
			for e > b && !utf8.RuneStart(word[e]) {
				e--
			}
		}
		*piece = p
		if !found {
			return append(ids[:start], int(w.unk))
		}
	}
	return ids
}

func isWhitespace(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || unicode.IsSpace(r)
}

// isControl is Hugging Face's: Unicode's "other" categories (Cc, Cf, Co, Cs, unassigned) but tab,
// newline and carriage return.
func isControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) {
		return true
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z)
}

func isPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '!' && r <= '/' || r >= ':' && r <= '@' || r >= '[' && r <= '`' || r >= '{' && r <= '~'
	}
	return unicode.IsPunct(r)
}

func isCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF || r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F || r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}
