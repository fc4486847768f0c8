package kvstore

import (
	"container/heap"
	"slices"
	"strings"
)

type cand struct {
	slot  int
	score float32
}

// topK keeps the k best candidates in a min-heap, so a scan over n entries costs n log k.
type topK struct {
	k int
	h candHeap
}

func newTopK(k int) *topK { return &topK{k: k, h: make(candHeap, 0, min(k, 1024))} }

func (t *topK) offer(slot int, score float32) {
	if len(t.h) < t.k {
		heap.Push(&t.h, cand{slot, score})
		return
	}
	if score > t.h[0].score {
		t.h[0] = cand{slot, score}
		heap.Fix(&t.h, 0)
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

type candHeap []cand

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return h[i].score < h[j].score }
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)        { *h = append(*h, x.(cand)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
