package tokenize

import (
	"strings"
	"sync"
	"testing"
)

func TestCountKnownValues(t *testing.T) {
	if got := Count(""); got != 0 {
		t.Fatalf("Count(\"\") = %d", got)
	}
	// o200k_base splits "hello world" into two tokens.
	if got := Count("hello world"); got != 2 {
		t.Fatalf("Count(hello world) = %d, want 2", got)
	}
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 100)
	if got := Count(long); got < 800 || got > 1100 {
		t.Fatalf("Count(900 words) = %d, want about 900", got)
	}
}

func TestTruncateWordBoundary(t *testing.T) {
	s := "alpha beta gamma delta epsilon zeta eta theta"
	out, cut := Truncate(s, 4)
	if !cut {
		t.Fatal("expected a cut")
	}
	if Count(out) > 4 {
		t.Fatalf("%q has %d tokens, over 4", out, Count(out))
	}
	if !strings.HasPrefix(s, out) {
		t.Fatalf("%q is not a prefix of the input", out)
	}
	// The cut must end at a word end.
	if next := s[len(out):]; next != "" && next[0] != ' ' {
		t.Fatalf("cut %q splits a word (rest %q)", out, next)
	}
	if same, cut := Truncate(s, 1000); cut || same != s {
		t.Fatalf("short text changed: %q %v", same, cut)
	}
	if empty, _ := Truncate(s, 0); empty != "" {
		t.Fatalf("Truncate(0) = %q", empty)
	}
}

func TestTruncateLongWordAndUnicode(t *testing.T) {
	word := strings.Repeat("x", 400)
	out, cut := Truncate(word, 3)
	if !cut || out == "" || Count(out) > 3 {
		t.Fatalf("long word: %q (%v)", out, cut)
	}
	jp := strings.Repeat("日本語のテキスト ", 50)
	out, _ = Truncate(jp, 7)
	if !strings.HasPrefix(jp, out) || strings.ContainsRune(out, '\uFFFD') {
		t.Fatalf("unicode cut produced %q", out)
	}
}

func TestConcurrentUse(t *testing.T) {
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if Count("concurrent counting works") == 0 {
				t.Error("zero count")
			}
			Truncate("some words to cut here", 2)
		}()
	}
	wg.Wait()
}
