package kvstore

import (
	"slices"
	"strings"
)

type cand struct {
	slot  int
	score float32
}

// topK keeps the k best candidates in a min-heap (worst at h[0]), so a scan over n entries
// costs n log k and, once full, one comparison per candidate that does not make it.
type topK struct {
	k int
	h []cand
}

func newTopK(k int) *topK { return &topK{k: k, h: make([]cand, 0, min(k, 1024))} }

func (t *topK) offer(slot int, score float32) {
	h := t.h
	if len(h) < t.k {
		h = append(h, cand{slot, score})
		for i := len(h) - 1; i > 0; { // sift up
			p := (i - 1) / 2
			if h[p].score <= h[i].score {
				break
			}
			h[p], h[i] = h[i], h[p]
			i = p
		}
		t.h = h
		return
	}
	if score <= h[0].score {
		return
	}
	h[0] = cand{slot, score}
	for i, n := 0, len(h); ; { // sift down
		l := 2*i + 1
		if l >= n {
			break
		}
		if r := l + 1; r < n && h[r].score < h[l].score {
			l = r
		}
		if h[i].score <= h[l].score {
			break
		}
		h[i], h[l] = h[l], h[i]
		i = l
	}
}

// sorted returns the candidates best first; ties break on id so results are stable.
func (t *topK) sorted(x *vindex) []cand {
	out := slices.Clone(t.h)
	slices.SortFunc(out, func(a, b cand) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return strings.Compare(x.entries[a.slot].ID, x.entries[b.slot].ID)
	})
	return out
}
