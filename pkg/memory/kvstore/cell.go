package kvstore

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"github.com/viterin/vek/vek32"
)

// cell is one partition of the index's unit vectors: a contiguous row-major matrix with, per
// row, the slot it belongs to and the slot's filter fields, so a scan reads three sequential
// arrays instead of jumping between slots.
type cell struct {
	slots []int32
	agent []int32
	flags []uint8
	vecs  []float32 // len(slots)*dim
}

// cellStore holds every usable vector of the index exactly once, in cells. Without centroids
// there is one cell (the exact scan reads it whole); trained, the cells are the k-means clusters
// of an inverted-file index and each slot lives in the cell of its nearest centroid.
type cellStore struct {
	cdim    int
	cells   []cell
	cellOf  []int32   // slot -> cell, -1 when the slot has no usable vector
	rowOf   []int32   // slot -> row in its cell
	cent    []float32 // len(cells)*dim, unit length; nil: one unclustered cell
	nprobe  int
	trained int // entries when the cells were clustered: clustered again when they double
}

// reset empties the store for vectors of dim dimensions (slots must be filed again).
func (c *cellStore) reset(dim int) {
	c.cdim, c.cells, c.cent, c.nprobe, c.trained = dim, []cell{{}}, nil, 0, 0
}

// vec is slot i's unit vector, nil when it has none.
func (c *cellStore) vec(i int) []float32 {
	k := c.cellOf[i]
	if k < 0 {
		return nil
	}
	r, d := int(c.rowOf[i]), c.cdim
	return c.cells[k].vecs[r*d : (r+1)*d]
}

// file appends slot i (unfiled) with unit vector v to its cell.
func (c *cellStore) file(i int, v []float32, agent int32, flags uint8) {
	k := int32(0)
	if c.cent != nil {
		k = nearestCell(c.cent, len(c.cells), c.cdim, v)
	}
	cl := &c.cells[k]
	c.cellOf[i], c.rowOf[i] = k, int32(len(cl.slots))
	cl.slots = append(cl.slots, int32(i))
	cl.agent = append(cl.agent, agent)
	cl.flags = append(cl.flags, flags)
	cl.vecs = append(cl.vecs, v...)
}

// unfile takes slot i out of its cell, moving the cell's last row into its place.
func (c *cellStore) unfile(i int) {
	k := c.cellOf[i]
	if k < 0 {
		return
	}
	cl, r, d := &c.cells[k], int(c.rowOf[i]), c.cdim
	last := len(cl.slots) - 1
	if r != last {
		moved := cl.slots[last]
		cl.slots[r], cl.agent[r], cl.flags[r] = moved, cl.agent[last], cl.flags[last]
		copy(cl.vecs[r*d:(r+1)*d], cl.vecs[last*d:(last+1)*d])
		c.rowOf[moved] = int32(r)
	}
	cl.slots, cl.agent, cl.flags, cl.vecs = cl.slots[:last], cl.agent[:last], cl.flags[:last], cl.vecs[:last*d]
	c.cellOf[i], c.rowOf[i] = -1, -1
}

// renumber records that slot from now lives at slot to (the index's delete moves its last slot
// into the freed one).
func (c *cellStore) renumber(from, to int) {
	if k := c.cellOf[from]; k >= 0 {
		c.cells[k].slots[c.rowOf[from]] = int32(to)
	}
	c.cellOf[to], c.rowOf[to] = c.cellOf[from], c.rowOf[from]
}

// train clusters the usable vectors (k-means on a sample of at most 64 per cell, 8 Lloyd
// rounds, √n cells) and refiles every slot under its nearest centroid, each cell allocated to
// its size. Fewer usable vectors than cells leave the store as it is.
func (x *vindex) train() {
	n := len(x.entries)
	nlist := max(16, int(math.Sqrt(float64(n))))
	d := x.dim
	var usable []int
	for i := range n {
		if x.cellOf[i] >= 0 {
			usable = append(usable, i)
		}
	}
	if len(usable) < nlist {
		return
	}
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	sample := slices.Clone(usable)
	rng.Shuffle(len(sample), func(a, b int) { sample[a], sample[b] = sample[b], sample[a] })
	sample = sample[:min(len(sample), nlist*64)]
	cent := make([]float32, nlist*d)
	for c := range nlist {
		copy(cent[c*d:(c+1)*d], x.vec(sample[c]))
	}
	assign := make([]int32, len(sample))
	sums := make([]float32, nlist*d)
	counts := make([]int, nlist)
	for range 8 {
		parallel(len(sample), func(j int) { assign[j] = nearestCell(cent, nlist, d, x.vec(sample[j])) })
		clear(sums)
		clear(counts)
		for j, s := range sample {
			c := int(assign[j])
			vek32.Add_Inplace(sums[c*d:(c+1)*d], x.vec(s))
			counts[c]++
		}
		for c := range nlist {
			if counts[c] == 0 {
				s := sample[rng.IntN(len(sample))] // an empty cell restarts at a random point
				copy(cent[c*d:(c+1)*d], x.vec(s))
				continue
			}
			row := sums[c*d : (c+1)*d]
			if nv := invNorm(row); nv > 0 {
				vek32.MulNumber_Into(cent[c*d:(c+1)*d], row, nv)
			}
		}
	}
	// Refile: assign every slot, size the cells, then copy the rows over from the old cells.
	of := make([]int32, n)
	parallel(n, func(i int) {
		of[i] = -1
		if v := x.vec(i); v != nil {
			of[i] = nearestCell(cent, nlist, d, v)
		}
	})
	size := make([]int, nlist)
	for _, c := range of {
		if c >= 0 {
			size[c]++
		}
	}
	cells := make([]cell, nlist)
	for c := range cells {
		cells[c] = cell{slots: make([]int32, 0, size[c]), agent: make([]int32, 0, size[c]),
			flags: make([]uint8, 0, size[c]), vecs: make([]float32, 0, size[c]*d)}
	}
	rows := make([]int32, n)
	for i := range n {
		rows[i] = -1
		if c := of[i]; c >= 0 {
			cl := &cells[c]
			rows[i] = int32(len(cl.slots))
			cl.slots = append(cl.slots, int32(i))
			cl.agent = append(cl.agent, x.agent[i])
			cl.flags = append(cl.flags, x.flags[i])
			cl.vecs = append(cl.vecs, x.vec(i)...)
		}
	}
	x.cells, x.cellOf, x.rowOf, x.cent = cells, of, rows, cent
	x.nprobe = min(nlist, max(MinProbe, int(math.Ceil(float64(nlist)*x.nprobeShare))))
	x.trained = n
}

// parallel runs f(0..n-1) on every core (training's nearest-centroid searches, which take most
// of a start-up with 100k entries); f must only write what belongs to its index.
func parallel(n int, f func(i int)) {
	w := min(runtime.GOMAXPROCS(0), max(1, n/1024))
	var wg sync.WaitGroup
	for k := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k * n / w; i < (k+1)*n/w; i++ {
				f(i)
			}
		}()
	}
	wg.Wait()
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

// probe returns the nprobe cells whose centroids are nearest q, nearest first.
func (c *cellStore) probe(q []float32) []int32 {
	d, np := c.cdim, c.nprobe
	out := make([]int32, 0, np)
	score := make([]float32, 0, np)
	for k := range len(c.cells) {
		s := vek32.Dot(c.cent[k*d:(k+1)*d], q)
		if len(out) == np && s <= score[np-1] {
			continue
		}
		// insert keeping score descending
		j := len(out)
		if j < np {
			out, score = append(out, 0), append(score, 0)
		} else {
			j = np - 1
		}
		for j > 0 && score[j-1] < s {
			out[j], score[j] = out[j-1], score[j-1]
			j--
		}
		out[j], score[j] = int32(k), s
	}
	return out
}
