package kvstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/skein-mesh/skein/pkg/memory"
)

// TestCellStoreUnderChurn: through creates, updates (vector, agent, status) and deletes, before
// and after the cells are clustered and re-clustered, every slot's row holds its entry's unit
// vector and filter fields, and a search probing every cell equals an exact scan.
func TestCellStoreUnderChurn(t *testing.T) {
	const dim = 8
	rng := rand.New(rand.NewPCG(3, 4))
	x := newIndex("m", dim)
	x.annMin, x.nprobeShare = 40, 1
	live := map[string]bool{}
	randEntry := func(id string) memory.Entry {
		v := make([]float32, dim)
		for k := range v {
			v[k] = float32(rng.NormFloat64())
		}
		e := memory.Entry{ID: id, Agent: fmt.Sprintf("a%d", rng.IntN(3)), Model: "m", Embedding: v}
		switch rng.IntN(6) {
		case 0:
			e.Status = memory.StatusRetired
		case 1:
			e.Model = "other" // unusable
		}
		return e
	}
	for step := range 3000 {
		switch r := rng.IntN(10); {
		case r < 6 || len(live) == 0:
			id := fmt.Sprintf("e%d", rng.IntN(600))
			x.put(randEntry(id))
			live[id] = true
		default:
			for id := range live {
				x.del(id)
				delete(live, id)
				break
			}
		}
		if step%100 != 99 {
			continue
		}
		if x.len() != len(live) {
			t.Fatalf("step %d: %d entries, %d live", step, x.len(), len(live))
		}
		filed := 0
		for c := range x.cells {
			cl := &x.cells[c]
			if len(cl.vecs) != len(cl.slots)*dim || len(cl.agent) != len(cl.slots) || len(cl.flags) != len(cl.slots) {
				t.Fatalf("step %d: cell %d arrays out of step", step, c)
			}
			for r, s := range cl.slots {
				filed++
				if x.cellOf[s] != int32(c) || x.rowOf[s] != int32(r) || cl.agent[r] != x.agent[s] || cl.flags[r] != x.flags[s] {
					t.Fatalf("step %d: slot %d misfiled", step, s)
				}
			}
		}
		for i := range x.entries {
			want := x.unit(&x.entries[i])
			got := x.vec(i)
			if (want == nil) != (got == nil) || x.usable[i] != (want != nil) {
				t.Fatalf("step %d: slot %d usable %v, filed %v", step, i, want != nil, got != nil)
			}
			for k := range want {
				if want[k] != got[k] {
					t.Fatalf("step %d: slot %d holds another vector", step, i)
				}
			}
			if want != nil {
				filed--
			}
		}
		if filed != 0 {
			t.Fatalf("step %d: %d rows filed for no slot", step, filed)
		}
		q := x.unit(&memory.Entry{Model: "m", Embedding: randEntry("q").Embedding})
		q = append([]float32(nil), q...)
		for _, f := range []memory.Filter{{}, {Agent: "a1"}, {Agent: "a2", Status: memory.StatusAny}} {
			got := x.search(q, 5, &f)
			m := x.compile(&f)
			exact := newTopK(5)
			for i := range x.entries {
				if x.usable[i] && x.match(&m, i) {
					exact.offer(i, dot(q, x.vec(i)))
				}
			}
			want := exact.sorted(x)
			if len(got) != len(want) {
				t.Fatalf("step %d: %d hits, exact %d", step, len(got), len(want))
			}
			for k := range got {
				if got[k] != want[k] {
					t.Fatalf("step %d %+v: hit %d is %v, exact %v", step, f, k, got[k], want[k])
				}
			}
		}
	}
	if x.cent == nil || x.trained < 80 {
		t.Fatalf("cells never re-clustered (trained at %d)", x.trained)
	}
}
