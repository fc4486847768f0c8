package kvstore

import (
	"math"
	"slices"

	"github.com/viterin/vek/vek32"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// vindex is the in-memory search index: entries in dense slots, the filtered fields (agent
// interned, tier, polarity, status) in small parallel arrays, and the unit vectors in cells
// (cell.go): contiguous matrices that carry their rows' filter fields along, so a scan streams
// through memory and compares integers. Below annMin entries there is one cell and a search
// scans it whole; from annMin on the cells are k-means clusters and a search scans the
// nprobeShare of them nearest the query. Callers hold Store.mu.
type vindex struct {
	dim   int
	model string

	pos     map[string]int // id -> slot
	entries []memory.Entry
	usable  []bool // vector of the store's model and dimension
	agent   []int32
	flags   []uint8

	agents map[string]int32

	cellStore
	scratch []float32

	// annMin is the entry count from which searches go through the clustered cells (0: always
	// exact); nprobeShare the share of the cells a search scans.
	annMin      int
	nprobeShare float64
	annTried    int
	// annDeferred holds training back while the bucket is replayed on open: one training at
	// the end instead of one per doubling.
	annDeferred bool
}

// annResume ends the replay: train once if the entries call for it.
func (x *vindex) annResume() {
	x.annDeferred = false
	if x.annMin > 0 && x.cent == nil && len(x.entries) >= x.annMin {
		x.annTried = len(x.entries)
		x.train()
	}
}

const (
	flagStrategic = 1 << iota
	flagPattern
	flagActive
	flagSuperseded
	flagRetired
	flagQuarantined
	flagCase
	flagSkill
)

func newIndex(model string, dim int) *vindex {
	x := &vindex{dim: dim, model: model, pos: map[string]int{}, agents: map[string]int32{}}
	x.cellStore.reset(dim)
	return x
}

func (x *vindex) len() int { return len(x.entries) }

func (x *vindex) get(id string) (*memory.Entry, bool) {
	i, ok := x.pos[id]
	if !ok {
		return nil, false
	}
	return &x.entries[i], true
}

func (x *vindex) internAgent(a string) int32 {
	if id, ok := x.agents[a]; ok {
		return id
	}
	id := int32(len(x.agents))
	x.agents[a] = id
	return id
}

func flagsOf(e *memory.Entry) uint8 {
	var f uint8
	if e.Tier == protocol.TierStrategic {
		f |= flagStrategic
	}
	if e.Polarity == protocol.PolarityPattern {
		f |= flagPattern
	}
	switch e.Status {
	case memory.StatusActive, "":
		f |= flagActive
	case memory.StatusSuperseded:
		f |= flagSuperseded
	case memory.StatusRetired:
		f |= flagRetired
	case memory.StatusQuarantined:
		f |= flagQuarantined
	}
	switch e.Kind {
	case memory.KindCase:
		f |= flagCase
	case memory.KindSkill:
		f |= flagSkill
	}
	return f
}

// put stores e in its slot (new or existing).
func (x *vindex) put(e memory.Entry) {
	i, ok := x.pos[e.ID]
	if !ok {
		i = len(x.entries)
		x.pos[e.ID] = i
		x.entries = append(x.entries, memory.Entry{})
		x.usable = append(x.usable, false)
		x.agent = append(x.agent, 0)
		x.flags = append(x.flags, 0)
		x.cellOf = append(x.cellOf, -1)
		x.rowOf = append(x.rowOf, -1)
	}
	x.entries[i] = e
	x.agent[i] = x.internAgent(e.Agent)
	x.flags[i] = flagsOf(&e)
	x.unfile(i)
	if v := x.unit(&x.entries[i]); v != nil {
		x.usable[i] = true
		x.file(i, v, x.agent[i], x.flags[i])
	} else {
		x.usable[i] = false
	}
	x.annUpdate()
}

// unit returns e's embedding scaled to unit length (in a scratch buffer), or nil when the
// entry's vector cannot be searched (another model or dimension, or zero).
func (x *vindex) unit(e *memory.Entry) []float32 {
	n := invNorm(e.Embedding)
	if e.Model != x.model || len(e.Embedding) != x.dim || n == 0 {
		return nil
	}
	if cap(x.scratch) < x.dim {
		x.scratch = make([]float32, x.dim)
	}
	v := x.scratch[:x.dim]
	vek32.MulNumber_Into(v, e.Embedding, n)
	return v
}

// annUpdate clusters the cells when the entries reach annMin, and again when they double since
// the last training.
func (x *vindex) annUpdate() {
	if x.annMin <= 0 || x.annDeferred {
		return
	}
	n := len(x.entries)
	if x.cent == nil && n >= max(x.annMin, 2*x.annTried) || x.cent != nil && n >= 2*x.trained {
		x.annTried = n // too few usable vectors to train: try again when the entries double
		x.train()
	}
}

// del removes id by moving the last slot into its place.
func (x *vindex) del(id string) {
	i, ok := x.pos[id]
	if !ok {
		return
	}
	last := len(x.entries) - 1
	x.unfile(i)
	if i != last {
		x.entries[i] = x.entries[last]
		x.usable[i], x.agent[i], x.flags[i] = x.usable[last], x.agent[last], x.flags[last]
		x.pos[x.entries[i].ID] = i
		x.renumber(last, i)
	}
	x.entries[last] = memory.Entry{}
	x.entries = x.entries[:last]
	x.usable, x.agent, x.flags = x.usable[:last], x.agent[:last], x.flags[:last]
	x.cellOf, x.rowOf = x.cellOf[:last], x.rowOf[:last]
	delete(x.pos, id)
}

// setModel switches the model the index serves, re-deriving every vector (migration).
func (x *vindex) setModel(model string, dim int) {
	if model == x.model && dim == x.dim {
		return
	}
	x.model, x.dim = model, dim
	x.annTried = 0 // other vectors: clustered again on the next write
	x.cellStore.reset(dim)
	for i := range x.entries {
		x.cellOf[i], x.rowOf[i] = -1, -1
		if v := x.unit(&x.entries[i]); v != nil {
			x.usable[i] = true
			x.file(i, v, x.agent[i], x.flags[i])
		} else {
			x.usable[i] = false
		}
	}
}

// matcher is a Filter compiled against the index's interned fields.
type matcher struct {
	f        *memory.Filter
	agent    int32 // -1: any
	none     bool  // the agent is unknown: nothing matches
	mask, eq uint8
}

func (x *vindex) compile(f *memory.Filter) matcher {
	m := matcher{f: f, agent: -1}
	if f.Agent != "" {
		id, ok := x.agents[f.Agent]
		if !ok {
			m.none = true
		}
		m.agent = id
	}
	switch f.Tier {
	case "":
	case protocol.TierStrategic:
		m.mask, m.eq = m.mask|flagStrategic, m.eq|flagStrategic
	case protocol.TierTactical:
		m.mask |= flagStrategic
	default:
		m.none = true
	}
	switch f.Polarity {
	case "":
	case protocol.PolarityPattern:
		m.mask, m.eq = m.mask|flagPattern, m.eq|flagPattern
	case protocol.PolarityAvoid:
		m.mask |= flagPattern
	default:
		m.none = true
	}
	switch f.Kind {
	case memory.KindAny:
	case "", memory.KindGuideline:
		m.mask |= flagCase | flagSkill
	case memory.KindCase:
		m.mask, m.eq = m.mask|flagCase|flagSkill, m.eq|flagCase
	case memory.KindSkill:
		m.mask, m.eq = m.mask|flagCase|flagSkill, m.eq|flagSkill
	default:
		m.none = true
	}
	switch f.Status {
	case memory.StatusAny:
	case "", memory.StatusActive:
		m.mask, m.eq = m.mask|flagActive, m.eq|flagActive
	case memory.StatusSuperseded:
		m.mask, m.eq = m.mask|flagSuperseded, m.eq|flagSuperseded
	case memory.StatusRetired:
		m.mask, m.eq = m.mask|flagRetired, m.eq|flagRetired
	case memory.StatusQuarantined:
		m.mask, m.eq = m.mask|flagQuarantined, m.eq|flagQuarantined
	default:
		m.none = true
	}
	return m
}

func (x *vindex) match(m *matcher, i int) bool {
	if m.agent >= 0 && x.agent[i] != m.agent {
		return false
	}
	if x.flags[i]&m.mask != m.eq {
		return false
	}
	return x.toolsMatch(m, i)
}

func (x *vindex) toolsMatch(m *matcher, i int) bool {
	if len(m.f.Tools) > 0 {
		tools := x.entries[i].Tools
		return slices.ContainsFunc(m.f.Tools, func(t string) bool { return slices.Contains(tools, t) })
	}
	return true
}

// search returns the slots of the k best matches, best first.
func (x *vindex) search(q []float32, k int, f *memory.Filter) []cand {
	m := x.compile(f)
	if m.none || k <= 0 || len(q) != x.dim {
		return nil
	}
	top := newTopK(k)
	if x.cent != nil {
		for _, c := range x.probe(q) {
			x.scan(&x.cells[c], q, &m, top)
		}
		// A selective filter (the small strategic tier, one tool) may have most of its
		// matches outside the probed cells: fewer than k found means scan them all.
		if len(top.h) == k {
			return top.sorted(x)
		}
		top.h = top.h[:0]
	}
	for c := range x.cells {
		x.scan(&x.cells[c], q, &m, top)
	}
	return top.sorted(x)
}

// scan offers the rows of c that pass the filter: the agent and flag checks read the cell's own
// arrays, the dot products its contiguous matrix.
func (x *vindex) scan(c *cell, q []float32, m *matcher, top *topK) {
	d, vecs, agent, flags := x.dim, c.vecs, c.agent, c.flags
	tools := len(m.f.Tools) > 0
	for r, s := range c.slots {
		if m.agent >= 0 && agent[r] != m.agent || flags[r]&m.mask != m.eq || tools && !x.toolsMatch(m, int(s)) {
			continue
		}
		top.offer(int(s), dot(q, vecs[r*d:(r+1)*d]))
	}
}

func (x *vindex) list(f *memory.Filter) []int {
	m := x.compile(f)
	if m.none {
		return nil
	}
	var out []int
	for i := range x.entries {
		if x.match(&m, i) {
			out = append(out, i)
		}
	}
	return out
}

func invNorm(v []float32) float32 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n == 0 {
		return 0
	}
	return float32(1 / math.Sqrt(n))
}

// dot is the inner loop of every search: vek's AVX2/FMA kernel (pure Go where the CPU lacks
// them) takes about a third of the CPU of an unrolled Go loop over 384-dim rows (9 vs 30 ms per
// 100k rows of 384 dims on this project's 2-core test machine).
func dot(a, b []float32) float32 { return vek32.Dot(a, b[:len(a)]) }
