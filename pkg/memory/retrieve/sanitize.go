package retrieve

import (
	"regexp"
	"strings"
	"unicode"

	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/redact"
)

// Guidelines come from model output over tool output, which an attacker can shape (a web page,
// a file). Before any of it reaches a prompt, markers that try to pass as instructions or to
// break out of the reference-data fence are neutralized. The text keeps its meaning for a
// reader; it loses the power to look like a role switch or a closing tag.
var injection = []struct {
	re   *regexp.Regexp
	repl string
}{
	// Phrases that address the model rather than describe a tool.
	{regexp.MustCompile(`(?i)\b(ignore|disregard|forget|override)\s+(all\s+|any\s+|the\s+)?(previous|prior|above|earlier|preceding|system|your)\s+(instructions?|prompts?|rules?|messages?|guidelines?)`), "[removed: instruction override]"},
	{regexp.MustCompile(`(?i)\byou\s+are\s+now\b`), "[removed: role change]"},
	{regexp.MustCompile(`(?i)\bnew\s+(system\s+)?instructions?\s*:`), "[removed: instruction override]"},
	// Chat-template special tokens and tags that could close or open a prompt section.
	{regexp.MustCompile(`<\|[^|>]{0,40}\|>`), "[removed: special token]"},
	{regexp.MustCompile(`(?i)</?\s*(guidelines?|system|instructions?|assistant|user|tool_result|tool_use|reference|hints?|im_start|im_end|worked-examples?|procedures?|experience)\b[^>]{0,80}>`), "[removed: tag]"},
	{regexp.MustCompile(`(?i)\[/?\s*(INST|SYS)\s*\]|<<\s*/?SYS\s*>>`), "[removed: tag]"},
	// Role labels that would read as a new turn.
	{regexp.MustCompile(`(?i)(^|[\s.;:])(system|assistant|user|human|developer)\s*:`), "$1$2 -"},
	// Code fences can end the block the executor puts guidelines in.
	{regexp.MustCompile("`{3,}|~{3,}"), "'"},
}

// MaxGuidelineChars caps one guideline's text after sanitizing.
const MaxGuidelineChars = 600

// Sanitize neutralizes prompt-injection markers in stored guideline text and flattens it to one
// line without control characters. It is idempotent.
func Sanitize(text string) string {
	// Normalised first, so a fullwidth "＜/guidelines＞" or a tag split by a zero-width space is
	// the tag the patterns below see.
	text = redact.String(gate.Normalize(text))
	text = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			// Format characters (zero-width joiners, bidi overrides) hide text from reviewers.
			return -1
		}
		return r
	}, text)
	for _, p := range injection {
		text = p.re.ReplaceAllString(text, p.repl)
	}
	text = strings.Join(strings.Fields(text), " ")
	if len(text) > MaxGuidelineChars {
		text = strings.ToValidUTF8(text[:MaxGuidelineChars], "")
	}
	return text
}
