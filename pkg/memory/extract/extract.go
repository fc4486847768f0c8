// Package extract is what every extractor that turns a trajectory into memory shares: the
// trajectory as the model reads it, one way to ask a model, a strict reading of its JSON answer,
// and the checks a distilled text must pass in code before memory takes it (fields and lengths,
// tools that were really called, quotes that really are in the trajectory). A refused answer is
// a Refusal with a code and a reason: the caller logs it and falls back to what code alone can
// distil, so a bad answer costs the tokens it took and nothing else.
//
// The case extractor (pkg/memory/cases) and the skill writer (pkg/memory/skills) use it; so can
// any later extractor (profile patches).
package extract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"github.com/skein-mesh/skein/pkg/tokenize"
)

// Ask sends one system and one user text to a model and returns its answer. Whoever provides it
// accounts for the call (a trace event, usage); maxTokens bounds the answer.
type Ask func(ctx context.Context, system, user string, maxTokens int) (string, error)

// Refusal codes: why a model's answer was not taken.
const (
	RefusedJSON     = "invalid_json"            // not the one JSON object asked for
	RefusedMissing  = "missing_field"           // a required field is empty
	RefusedSize     = "oversized"               // a field is longer than its limit
	RefusedTool     = "unknown_tool"            // names a tool the trajectory never called
	RefusedQuote    = "quote_not_in_trajectory" // a quote that is not verbatim in the trajectory
	RefusedRange    = "out_of_range"            // a number outside its range, or contradicting the facts
	RefusedModel    = "model_failed"            // the model call itself failed
	RefusedSentence = "not_text"                // a field holds control characters or markup
)

// Refusal is a model answer that did not pass; Field names the field at fault ("" for the
// whole answer).
type Refusal struct {
	Code   string
	Field  string
	Detail string
}

func (r *Refusal) Error() string {
	if r.Field == "" {
		return r.Code + ": " + r.Detail
	}
	return r.Code + " (" + r.Field + "): " + r.Detail
}

// Refused returns the Refusal in err's chain, if any.
func Refused(err error) *Refusal {
	var r *Refusal
	if errors.As(err, &r) {
		return r
	}
	return nil
}

func refuse(code, field, format string, args ...any) error {
	return &Refusal{Code: code, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// Decode reads a model's answer into v: exactly one JSON object, no field v does not have,
// nothing after it. Only a Markdown code fence around the object is forgiven, since models add
// one even when told not to.
func Decode(text string, v any) error {
	body := strings.TrimSpace(text)
	if strings.HasPrefix(body, "```") {
		body = strings.TrimPrefix(body, "```")
		if nl := strings.IndexByte(body, '\n'); nl >= 0 && !strings.Contains(body[:nl], "{") {
			body = body[nl+1:]
		}
		body = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(body), "```"))
	}
	if !strings.HasPrefix(body, "{") {
		return refuse(RefusedJSON, "", "the answer does not start with a JSON object: %q", clip(body, 80))
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return refuse(RefusedJSON, "", "%v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return refuse(RefusedJSON, "", "text after the JSON object")
	}
	return nil
}

// Text checks one distilled text: present when required, at most maxChars bytes and maxTokens
// tokens (0: no limit), and plain text (no control characters; no markup that could open or
// close a fence in a prompt).
func Text(field, s string, required bool, maxChars, maxTokens int) error {
	s = strings.TrimSpace(s)
	if s == "" {
		if required {
			return refuse(RefusedMissing, field, "empty")
		}
		return nil
	}
	if maxChars > 0 && len(s) > maxChars {
		return refuse(RefusedSize, field, "%d bytes, at most %d", len(s), maxChars)
	}
	if maxTokens > 0 {
		if n := tokenize.Count(s); n > maxTokens {
			return refuse(RefusedSize, field, "%d tokens, at most %d", n, maxTokens)
		}
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\n' }) {
		return refuse(RefusedSentence, field, "holds control characters")
	}
	if strings.Contains(s, "</") || strings.Contains(s, "<|") {
		return refuse(RefusedSentence, field, "holds markup: %q", clip(s, 60))
	}
	return nil
}

// Tools checks that every tool named was really called.
func Tools(field string, named, called []string) error {
	for _, t := range named {
		if !slices.Contains(called, t) {
			return refuse(RefusedTool, field, "%q was never called (called: %s)", t, strings.Join(called, ", "))
		}
	}
	return nil
}

// Quote checks that quote appears verbatim in the trajectory's rendered text (runs of
// whitespace count as one space; nothing else is forgiven).
func Quote(field, quote string, t Trajectory) error {
	q := squash(quote)
	if q == "" {
		return refuse(RefusedMissing, field, "empty quote")
	}
	if !strings.Contains(squash(t.Render(0)), q) {
		return refuse(RefusedQuote, field, "%q is not in the trajectory", clip(q, 80))
	}
	return nil
}

// Number checks a number is within [lo, hi].
func Number(field string, x, lo, hi float64) error {
	if x < lo || x > hi || x != x {
		return refuse(RefusedRange, field, "%v is outside [%v, %v]", x, lo, hi)
	}
	return nil
}

// squash collapses runs of whitespace to one space and trims.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
