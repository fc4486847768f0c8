package kvstore

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/viterin/vek/vek32"
)

// ivf is an inverted-file index over the index's unit vectors: k-means cells, each slot filed
// under its nearest centroid, and a search that scans only the slots of the nprobe cells whose
// centroids are nearest the query. It trades exactness for a scan of a fraction of the entries;
// the exact scan stays in charge below Options.ANNMin entries.
type ivf struct {
	dim     int
	nlist   int
	nprobe  int
	cent    []float32 // nlist*dim, unit length
	cell    []int32   // slot -> cell, -1 when the slot's vector is unusable
	members [][]int32 // cell -> slots
	trained int       // entries when it was trained: retrain when they double
}

// trainIVF clusters the usable vectors of x (a sample of at most 64 per cell, 8 Lloyd rounds)
// and files every slot.
func trainIVF(x *vindex, nprobeShare float64) *ivf {
	n := len(x.entries)
	nlist := max(16, int(math.Sqrt(float64(n))))
	d := x.dim
	var usable []int
	for i := range n {
		if x.usable[i] {
			usable = append(usable, i)
		}
	}
	if len(usable) < nlist {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	sample := slices.Clone(usable)
	rng.Shuffle(len(sample), func(a, b int) { sample[a], sample[b] = sample[b], sample[a] })
	sample = sample[:min(len(sample), nlist*64)]
	cent := make([]float32, nlist*d)
	for c := range nlist {
		copy(cent[c*d:(c+1)*d], x.vecs[sample[c]*d:(sample[c]+1)*d])
	}
	assign := make([]int32, len(sample))
	sums := make([]float32, nlist*d)
	counts := make([]int, nlist)
	for range 8 {
		for j, s := range sample {
			assign[j] = nearestCell(cent, nlist, d, x.vecs[s*d:(s+1)*d])
		}
		clear(sums)
		clear(counts)
		for j, s := range sample {
			c := int(assign[j])
			vek32.Add_Inplace(sums[c*d:(c+1)*d], x.vecs[s*d:(s+1)*d])
			counts[c]++
		}
		for c := range nlist {
			if counts[c] == 0 {
				s := sample[rng.IntN(len(sample))] // an empty cell restarts at a random point
				copy(cent[c*d:(c+1)*d], x.vecs[s*d:(s+1)*d])
				continue
			}
			row := sums[c*d : (c+1)*d]
			if nv := invNorm(row); nv > 0 {
				vek32.MulNumber_Into(cent[c*d:(c+1)*d], row, nv)
			}
		}
	}
	v := &ivf{dim: d, nlist: nlist, nprobe: max(1, int(math.Ceil(float64(nlist)*nprobeShare))), cent: cent,
		cell: make([]int32, n), members: make([][]int32, nlist), trained: n}
	for i := range n {
		v.cell[i] = -1
		v.file(x, i)
	}
	return v
}

func nearestCell(cent []float32, nlist, d int, q []float32) int32 {
	best, bs := int32(0), float32(math.Inf(-1))
	for c := range nlist {
		if s := vek32.Dot(cent[c*d:(c+1)*d], q); s > bs {
			best, bs = int32(c), s
		}
	}
	return best
}

// file puts slot i under its nearest cell (after its vector changed or it was added).
func (v *ivf) file(x *vindex, i int) {
	for len(v.cell) <= i {
		v.cell = append(v.cell, -1)
	}
	v.unfile(i)
	if !x.usable[i] {
		return
	}
	c := nearestCell(v.cent, v.nlist, v.dim, x.vecs[i*v.dim:(i+1)*v.dim])
	v.cell[i] = c
	v.members[c] = append(v.members[c], int32(i))
}

func (v *ivf) unfile(i int) {
	if i >= len(v.cell) || v.cell[i] < 0 {
		return
	}
	m := v.members[v.cell[i]]
	if k := slices.Index(m, int32(i)); k >= 0 {
		m[k] = m[len(m)-1]
		v.members[v.cell[i]] = m[:len(m)-1]
	}
	v.cell[i] = -1
}

// moved records that the slot last now lives at i (the index's delete moves the last slot
// into the freed one) and drops the last slot.
func (v *ivf) moved(last, i int) {
	v.unfile(i)
	if c := v.cell[last]; c >= 0 {
		m := v.members[c]
		if k := slices.Index(m, int32(last)); k >= 0 {
			m[k] = int32(i)
		}
	}
	v.cell[i] = v.cell[last]
	v.cell = v.cell[:last]
}

// probe returns the cells to scan for q, nearest first.
func (v *ivf) probe(q []float32) []int32 {
	type cs struct {
		c int32
		s float32
	}
	all := make([]cs, v.nlist)
	for c := range v.nlist {
		all[c] = cs{int32(c), vek32.Dot(v.cent[c*v.dim:(c+1)*v.dim], q)}
	}
	slices.SortFunc(all, func(a, b cs) int {
		switch {
		case a.s > b.s:
			return -1
		case a.s < b.s:
			return 1
		}
		return 0
	})
	out := make([]int32, v.nprobe)
	for i := range out {
		out[i] = all[i].c
	}
	return out
}
