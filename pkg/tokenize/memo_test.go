package tokenize

import (
	"strings"
	"testing"
)

func TestCountRemembersLongTextsAndStaysBounded(t *testing.T) {
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 20)
	want := len(encoder().EncodeOrdinary(long))
	if got := Count(long); got != want {
		t.Fatalf("first count %d, BPE says %d", got, want)
	}
	if _, ok := memo.get(memoKey{h: hashOf(long), n: len(long)}); !ok {
		t.Fatal("a long text's count was not remembered")
	}
	if got := Count(long); got != want {
		t.Fatalf("remembered count %d, BPE says %d", got, want)
	}
	// Same length, different text: never the other text's count.
	other := strings.Repeat("x", len(long))
	if got, want := Count(other), len(encoder().EncodeOrdinary(other)); got != want {
		t.Fatalf("count of a same-length text %d, BPE says %d", got, want)
	}
	m := &countMemo{cur: map[memoKey]int{}}
	for i := 0; i < 3*memoEntries; i++ {
		m.put(memoKey{h: uint64(i), n: i}, i)
	}
	if n := len(m.cur) + len(m.old); n > 2*memoEntries {
		t.Fatalf("memo holds %d entries, bound is %d", n, 2*memoEntries)
	}
	if _, ok := m.get(memoKey{h: uint64(3*memoEntries - 1), n: 3*memoEntries - 1}); !ok {
		t.Fatal("the newest entry was dropped")
	}
}
