package retrieve

import (
	"math"
	"strings"
	"unicode"
)

// BM25 parameters: the usual defaults. Tool documents are short and similar in length, so
// length normalization matters little either way.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// bm25 scores every document against the query terms. Scores are >= 0; a document sharing no
// term with the query scores 0.
func bm25(query []string, docs [][]string) []float64 {
	n := float64(len(docs))
	df := map[string]int{}
	total := 0
	for _, d := range docs {
		total += len(d)
		seen := map[string]bool{}
		for _, t := range d {
			if !seen[t] {
				seen[t] = true
				df[t]++
			}
		}
	}
	avg := float64(total) / max(n, 1)
	// A query term counts once: a long task that repeats a word should not drown the others.
	q := map[string]bool{}
	for _, t := range query {
		q[t] = true
	}
	out := make([]float64, len(docs))
	for i, d := range docs {
		tf := map[string]int{}
		for _, t := range d {
			if q[t] {
				tf[t]++
			}
		}
		dl := float64(len(d))
		s := 0.0
		for t, f := range tf {
			idf := math.Log(1 + (n-float64(df[t])+0.5)/(float64(df[t])+0.5))
			ff := float64(f)
			s += idf * ff * (bm25K1 + 1) / (ff + bm25K1*(1-bm25B+bm25B*dl/max(avg, 1)))
		}
		out[i] = s
	}
	return out
}

// terms splits text into lowercase, lightly stemmed words: snake_case and camelCase names are
// split into their parts, so `send_slack_message` matches "send a message on Slack".
func terms(text string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) == 0 {
			return
		}
		w := strings.ToLower(string(cur))
		cur = cur[:0]
		if len(w) > 1 && !stopwords[w] {
			out = append(out, stem(w))
		}
	}
	rs := []rune(text)
	for i, r := range rs {
		switch {
		case r == '-' && len(cur) > 0 && i+1 < len(rs) && unicode.IsLetter(rs[i+1]):
			// "e-mail" is "email" too: keep the joined word besides the parts.
			j := i + 1
			for j < len(rs) && (unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j])) {
				j++
			}
			if joined := strings.ToLower(string(cur) + string(rs[i+1:j])); !stopwords[joined] {
				out = append(out, stem(joined))
			}
			flush()
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			// camelCase boundary: a lower-case letter followed by an upper-case one.
			if i > 0 && unicode.IsUpper(r) && unicode.IsLower(rs[i-1]) {
				flush()
			}
			cur = append(cur, r)
		default:
			flush()
		}
	}
	flush()
	return out
}

// stem strips the commonest English inflections. It is deliberately crude: both sides of the
// match go through it, so it only has to be consistent.
func stem(w string) string {
	if len(w) <= 3 {
		return w
	}
	for _, suf := range []string{"ies", "ing", "ed", "es", "s"} {
		if !strings.HasSuffix(w, suf) || len(w)-len(suf) < 3 {
			continue
		}
		base := w[:len(w)-len(suf)]
		switch suf {
		case "ies":
			return base + "y"
		case "s":
			if strings.HasSuffix(w, "ss") || strings.HasSuffix(w, "us") {
				return w
			}
		case "es":
			// "boxes", "matches" lose "es"; "files", "issues" lose only the "s".
			if !strings.HasSuffix(base, "x") && !strings.HasSuffix(base, "ch") && !strings.HasSuffix(base, "sh") && !strings.HasSuffix(base, "ss") {
				return w[:len(w)-1]
			}
		case "ed", "ing":
			if len(base) >= 2 && base[len(base)-1] == base[len(base)-2] && !strings.HasSuffix(base, "ll") && !strings.HasSuffix(base, "ss") {
				base = base[:len(base)-1] // "mapped" -> "map"
			}
		}
		return base
	}
	return w
}

var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an and are as at be by for from has have in into is it its of on or that the this to
		was were will with what which who whom how when where why all any each our your their them they we you us me my
		do does did not no can could should would may might must than then there these those also only just about
		use us please need want get give make tell show let our ok`) {
		stopwords[w] = true
	}
}
