package protocol

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The documents' pattern for a task's text says what the gateway's check says: a text has a
// character the pattern matches exactly when strings.TrimSpace leaves something of it.
func TestTaskTextPatternIsUnicodeIsSpace(t *testing.T) {
	re := regexp.MustCompile(TaskTextPattern)
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		s := string(r)
		if re.MatchString(s) != (strings.TrimSpace(s) != "") {
			t.Errorf("U+%04X: pattern matches %v, unicode.IsSpace %v", r, re.MatchString(s), unicode.IsSpace(r))
		}
	}
}

func TestBudgetCheckRefusesNegativeLimits(t *testing.T) {
	if err := (*Budget)(nil).Check(); err != nil {
		t.Errorf("no budget: %v", err)
	}
	if err := (&Budget{MaxTurns: 3, MaxUSD: 0.5}).Check(); err != nil {
		t.Errorf("a budget: %v", err)
	}
	for _, b := range []Budget{{MaxTurns: -1}, {MaxUSD: -0.01}, {DeadlineS: -1}, {MaxInputTokens: -5}} {
		if err := b.Check(); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%+v: %v, want a refusal naming the negative limit", b, err)
		}
	}
}
