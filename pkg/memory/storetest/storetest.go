// Package storetest is the contract every memory.Store passes. A store's own test calls Run with
// a function that opens a fresh, empty store, and RunReopen with one that reopens the same storage.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Dim is the vector dimension the suite uses; small, so a bug in ranking is easy to read.
const Dim = 8

// Model is the embedding model id the suite opens stores with.
const Model = "storetest-model-v1"

// Opener returns a new, empty store for the test, closed by the store's own cleanup or by the
// suite.
type Opener func(t *testing.T, model string, dim int) memory.Store

// Backing prepares one fresh storage for a test and returns a function that opens a store on it;
// every call of that function opens the same storage (a second replica, or a restart).
type Backing func(t *testing.T) func(model string, dim int) (memory.Store, error)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Unit returns v scaled to length 1.
func Unit(v []float32) []float32 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	n := math.Sqrt(s)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) / n)
	}
	return out
}

// Axis returns the unit vector along axis i, tilted a little towards axis j by w, so tests can
// lay out entries at known cosines from a query.
func Axis(i, j int, w float32) []float32 {
	v := make([]float32, Dim)
	v[i] = 1
	v[j] += w
	return Unit(v)
}

func cos(a, b []float32) float64 {
	var d float64
	for i := range a {
		d += float64(a[i]) * float64(b[i])
	}
	return d
}

// NewEntry builds a valid active tactical entry for agent with the given text and vector.
func NewEntry(agent, text string, vec []float32) memory.Entry {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return memory.Entry{
		ID:        memory.EntryID(agent, protocol.PolarityAvoid, text),
		Agent:     agent,
		Text:      text,
		Polarity:  protocol.PolarityAvoid,
		Tier:      protocol.TierTactical,
		Sessions:  []string{"s1"},
		Hits:      1,
		Model:     Model,
		Embedding: vec,
		Source:    memory.SourceMiner,
		Status:    memory.StatusActive,
		Created:   now,
		Updated:   now,
	}
}

func mustPut(t *testing.T, s memory.Store, e memory.Entry) memory.Entry {
	t.Helper()
	got, err := s.Put(ctxT(t), e)
	if err != nil {
		t.Fatalf("Put %s: %v", e.ID, err)
	}
	return got
}

func ids(hits []memory.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Entry.Text
	}
	return out
}

func texts(es []memory.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Text
	}
	slices.Sort(out)
	return out
}

// eventually retries check until it passes or the deadline ends; stores backed by a replicated
// log (or an eventually consistent server) may take a moment to show a write in Search.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Run runs the contract on stores from open.
func Run(t *testing.T, open Opener) {
	t.Run("PutGetRoundTrip", func(t *testing.T) { testRoundTrip(t, open(t, Model, Dim)) })
	t.Run("CreateRefusesExisting", func(t *testing.T) { testCreateExisting(t, open(t, Model, Dim)) })
	t.Run("CompareAndSet", func(t *testing.T) { testCAS(t, open(t, Model, Dim)) })
	t.Run("ConcurrentWritersOneWins", func(t *testing.T) { testConcurrentCAS(t, open(t, Model, Dim)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, open(t, Model, Dim)) })
	t.Run("SearchRanksByCosine", func(t *testing.T) { testRanking(t, open(t, Model, Dim)) })
	t.Run("SearchFilters", func(t *testing.T) { testFilters(t, open(t, Model, Dim)) })
	t.Run("ListFilters", func(t *testing.T) { testList(t, open(t, Model, Dim)) })
	t.Run("UpdateMovesVector", func(t *testing.T) { testUpdateVector(t, open(t, Model, Dim)) })
	t.Run("ModelRecorded", func(t *testing.T) { testModel(t, open(t, Model, Dim)) })
	t.Run("RefusesBadEntries", func(t *testing.T) { testBadEntries(t, open(t, Model, Dim)) })
	t.Run("Kinds", func(t *testing.T) { testKinds(t, open(t, Model, Dim)) })
}

func testRoundTrip(t *testing.T, s memory.Store) {
	e := NewEntry("coder", "Run go vet before go test.", Axis(0, 1, 0))
	e.Tools = []string{"go_vet", "go_test"}
	e.Sessions = []string{"s1", "s2"}
	e.Helpful, e.Harmful, e.Hits = 3, 1, 7
	e.Mined = []string{"s1/c1"}
	e.Tier = protocol.TierStrategic
	e.Polarity = protocol.PolarityPattern
	e.Source = memory.SourceHuman
	// The life-cycle fields travel whole, in Get and in search hits.
	at := e.Created.Add(time.Minute)
	e.Source, e.SourceAgent, e.SourceSession = memory.SourceSubagent, "helper", "sess-9"
	e.Supersedes = []string{"old-1"}
	e.Marks = []protocol.MemoryMark{{Session: "s2", Helpful: 2, Use: protocol.UseEcho, At: at}}
	e.Utility, e.Echoes, e.Fizzles = 0.3, 1, 0
	e.History = []protocol.MemoryChange{{At: at, Event: protocol.ChangeSupersedes, Other: "old-1", Reason: "more sessions (5 vs 4)"}}
	got := mustPut(t, s, e)
	if got.Revision == 0 {
		t.Fatalf("Put returned revision 0")
	}
	back, err := s.Get(ctxT(t), e.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if back.Revision != got.Revision {
		t.Errorf("Get revision %d, Put returned %d", back.Revision, got.Revision)
	}
	if back.Text != e.Text || back.Agent != e.Agent || back.Tier != e.Tier || back.Polarity != e.Polarity ||
		back.Helpful != 3 || back.Harmful != 1 || back.Hits != 7 || back.Source != e.Source ||
		back.Status != memory.StatusActive || back.Model != Model {
		t.Errorf("round trip changed the entry:\n got %+v\nwant %+v", back, e)
	}
	if !slices.Equal(back.Tools, e.Tools) || !slices.Equal(back.Sessions, e.Sessions) || !slices.Equal(back.Mined, e.Mined) {
		t.Errorf("lists changed: tools %v sessions %v mined %v", back.Tools, back.Sessions, back.Mined)
	}
	if !back.Created.Equal(e.Created) || !back.Updated.Equal(e.Updated) {
		t.Errorf("times changed: created %v want %v, updated %v want %v", back.Created, e.Created, back.Updated, e.Updated)
	}
	if len(back.Embedding) != Dim || cos(back.Embedding, e.Embedding) < 0.9999 {
		t.Errorf("embedding changed: %v want %v", back.Embedding, e.Embedding)
	}
	lifeCycle := func(where string, x memory.Entry) {
		if x.SourceAgent != "helper" || x.SourceSession != "sess-9" || !slices.Equal(x.Supersedes, e.Supersedes) ||
			len(x.Marks) != 1 || x.Marks[0].Session != "s2" || x.Marks[0].Use != protocol.UseEcho || !x.Marks[0].At.Equal(at) ||
			x.Utility != 0.3 || x.Echoes != 1 || len(x.History) != 1 || x.History[0].Event != protocol.ChangeSupersedes ||
			x.History[0].Other != "old-1" || x.History[0].Reason != e.History[0].Reason || !x.History[0].At.Equal(at) {
			t.Errorf("%s lost life-cycle fields: %+v", where, x)
		}
	}
	lifeCycle("Get", back)
	eventually(t, "search hit with every field", func() error {
		hits, err := s.Search(ctxT(t), e.Embedding, 1, memory.Filter{Agent: e.Agent})
		if err != nil {
			return err
		}
		if len(hits) != 1 || hits[0].Entry.ID != e.ID {
			return fmt.Errorf("search found %v", ids(hits))
		}
		lifeCycle("Search", hits[0].Entry)
		return nil
	})
	if _, err := s.Get(ctxT(t), "no-such-id"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("Get missing: %v, want ErrNotFound", err)
	}
}

func testCreateExisting(t *testing.T, s memory.Store) {
	e := NewEntry("coder", "Quote paths with spaces.", Axis(1, 2, 0))
	mustPut(t, s, e)
	if _, err := s.Put(ctxT(t), e); !errors.Is(err, memory.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
}

func testCAS(t *testing.T, s memory.Store) {
	e := NewEntry("coder", "Pin tool versions.", Axis(2, 3, 0))
	v1 := mustPut(t, s, e)
	v1.Hits = 2
	v2 := mustPut(t, s, v1)
	if v2.Revision == v1.Revision {
		t.Fatalf("update kept revision %d", v2.Revision)
	}
	stale := v1
	stale.Hits = 99
	if _, err := s.Put(ctxT(t), stale); !errors.Is(err, memory.ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	got, err := s.Get(ctxT(t), e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hits != 2 {
		t.Fatalf("stale write landed: hits %d", got.Hits)
	}
	ghost := NewEntry("coder", "Never written.", Axis(3, 4, 0))
	ghost.Revision = 5
	if _, err := s.Put(ctxT(t), ghost); !errors.Is(err, memory.ErrConflict) && !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("update of a missing entry: %v, want ErrConflict or ErrNotFound", err)
	}
}

// testConcurrentCAS races writers that read-modify-write one counter; retrying on ErrConflict,
// every increment must land exactly once.
func testConcurrentCAS(t *testing.T, s memory.Store) {
	e := mustPut(t, s, NewEntry("coder", "Count me.", Axis(4, 5, 0)))
	const writers, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxT(t)
			for range each {
				for {
					cur, err := s.Get(ctx, e.ID)
					if err != nil {
						errs <- err
						return
					}
					cur.Hits++
					if _, err = s.Put(ctx, cur); err == nil {
						break
					} else if !errors.Is(err, memory.ErrConflict) {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	got, err := s.Get(ctxT(t), e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + writers*each; got.Hits != want {
		t.Fatalf("hits %d after %d increments, want %d (a lost update)", got.Hits, writers*each, want)
	}
}

func testDelete(t *testing.T, s memory.Store) {
	e := mustPut(t, s, NewEntry("coder", "Delete me.", Axis(5, 6, 0)))
	keep := mustPut(t, s, NewEntry("coder", "Keep me.", Axis(5, 6, 0.5)))
	if err := s.Delete(ctxT(t), e.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctxT(t), e.ID); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctxT(t), e.ID); err != nil {
		t.Fatalf("second Delete (eviction is idempotent): %v", err)
	}
	eventually(t, "deleted entry still searchable", func() error {
		hits, err := s.Search(ctxT(t), Axis(5, 6, 0), 10, memory.Filter{})
		if err != nil {
			return err
		}
		if got := ids(hits); !slices.Equal(got, []string{keep.Text}) {
			return fmt.Errorf("hits %q, want only %q", got, keep.Text)
		}
		return nil
	})
	// A deleted id can be created again.
	again := NewEntry("coder", "Delete me.", Axis(5, 6, 0))
	if _, err := s.Put(ctxT(t), again); err != nil {
		t.Fatalf("recreate after delete: %v", err)
	}
}

func testRanking(t *testing.T, s memory.Store) {
	q := Axis(0, 1, 0)
	// Tilting towards axis 1 by w lowers the cosine to the query monotonically.
	want := []string{"w0", "w0.3", "w1", "w3", "w10"}
	for _, w := range []float32{10, 0.3, 3, 0, 1} {
		mustPut(t, s, NewEntry("coder", fmt.Sprintf("w%g", w), Axis(0, 1, w)))
	}
	mustPut(t, s, NewEntry("coder", "opposite", Unit([]float32{-1, 0, 0, 0, 0, 0, 0, 0.1})))
	eventually(t, "ranking", func() error {
		hits, err := s.Search(ctxT(t), q, 5, memory.Filter{})
		if err != nil {
			return err
		}
		if got := ids(hits); !slices.Equal(got, want) {
			return fmt.Errorf("order %q, want %q", got, want)
		}
		// Hits may leave the vector out (a server sends less); Get always has it.
		for _, h := range hits {
			full, err := s.Get(ctxT(t), h.Entry.ID)
			if err != nil {
				return err
			}
			if h.Entry.Embedding != nil && cos(h.Entry.Embedding, full.Embedding) < 0.9999 {
				return fmt.Errorf("%s: hit carries another vector than the entry", h.Entry.Text)
			}
			if c := cos(q, full.Embedding); math.Abs(h.Score-c) > 1e-3 {
				return fmt.Errorf("%s: score %f, cosine %f", h.Entry.Text, h.Score, c)
			}
		}
		return nil
	})
	hits, err := s.Search(ctxT(t), q, 2, memory.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(hits); !slices.Equal(got, want[:2]) {
		t.Fatalf("k=2: %q, want %q", got, want[:2])
	}
	// Scores are cosines even for a query that is not unit length.
	long := []float32{3, 0, 0, 0, 0, 0, 0, 0}
	hits, err = s.Search(ctxT(t), long, 1, memory.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 1 || math.Abs(hits[0].Score-1) > 1e-3 {
		t.Fatalf("non-unit query: %+v", hits)
	}
	if _, err := s.Search(ctxT(t), []float32{1, 0}, 1, memory.Filter{}); err == nil {
		t.Fatalf("query of the wrong dimension accepted")
	}
}

type fixture struct {
	text     string
	agent    string
	tier     protocol.Tier
	polarity protocol.Polarity
	tools    []string
	status   memory.Status
}

var fixtures = []fixture{
	{"a-tac-avoid-git", "alpha", protocol.TierTactical, protocol.PolarityAvoid, []string{"git"}, memory.StatusActive},
	{"a-tac-pattern-go", "alpha", protocol.TierTactical, protocol.PolarityPattern, []string{"go_test", "go_vet"}, memory.StatusActive},
	{"a-str-avoid-none", "alpha", protocol.TierStrategic, protocol.PolarityAvoid, nil, memory.StatusActive},
	{"a-str-pattern-git-super", "alpha", protocol.TierStrategic, protocol.PolarityPattern, []string{"git"}, memory.StatusSuperseded},
	{"a-tac-avoid-retired", "alpha", protocol.TierTactical, protocol.PolarityAvoid, []string{"go_test"}, memory.StatusRetired},
	{"b-tac-avoid-git", "beta", protocol.TierTactical, protocol.PolarityAvoid, []string{"git"}, memory.StatusActive},
	{"b-str-pattern-gitx", "beta", protocol.TierStrategic, protocol.PolarityPattern, []string{"gitx"}, memory.StatusActive},
	{"b-tac-avoid-quarantined", "beta", protocol.TierTactical, protocol.PolarityAvoid, []string{"git"}, memory.StatusQuarantined},
}

var filterCases = []struct {
	name string
	f    memory.Filter
	want []string
}{
	{"active by default", memory.Filter{}, []string{"a-str-avoid-none", "a-tac-avoid-git", "a-tac-pattern-go", "b-str-pattern-gitx", "b-tac-avoid-git"}},
	{"agent", memory.Filter{Agent: "alpha"}, []string{"a-str-avoid-none", "a-tac-avoid-git", "a-tac-pattern-go"}},
	{"tier", memory.Filter{Tier: protocol.TierStrategic}, []string{"a-str-avoid-none", "b-str-pattern-gitx"}},
	{"polarity", memory.Filter{Polarity: protocol.PolarityPattern}, []string{"a-tac-pattern-go", "b-str-pattern-gitx"}},
	{"tool exact, not prefix", memory.Filter{Tools: []string{"git"}}, []string{"a-tac-avoid-git", "b-tac-avoid-git"}},
	{"any of tools", memory.Filter{Tools: []string{"go_vet", "gitx"}}, []string{"a-tac-pattern-go", "b-str-pattern-gitx"}},
	{"combined", memory.Filter{Agent: "alpha", Tier: protocol.TierTactical, Polarity: protocol.PolarityAvoid, Tools: []string{"git", "go_test"}}, []string{"a-tac-avoid-git"}},
	{"status superseded", memory.Filter{Status: memory.StatusSuperseded}, []string{"a-str-pattern-git-super"}},
	{"status quarantined", memory.Filter{Status: memory.StatusQuarantined}, []string{"b-tac-avoid-quarantined"}},
	{"status any", memory.Filter{Agent: "alpha", Status: memory.StatusAny}, []string{"a-str-avoid-none", "a-str-pattern-git-super", "a-tac-avoid-git", "a-tac-avoid-retired", "a-tac-pattern-go"}},
	{"status any with tool", memory.Filter{Tools: []string{"go_test"}, Status: memory.StatusAny}, []string{"a-tac-avoid-retired", "a-tac-pattern-go"}},
	{"nothing", memory.Filter{Agent: "gamma"}, nil},
}

func putFixtures(t *testing.T, s memory.Store) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range fixtures {
		v := make([]float32, Dim)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		e := NewEntry(f.agent, f.text, Unit(v))
		e.ID = memory.EntryID(f.agent, f.polarity, f.text)
		e.Tier, e.Polarity, e.Tools, e.Status = f.tier, f.polarity, f.tools, f.status
		mustPut(t, s, e)
	}
}

func testFilters(t *testing.T, s memory.Store) {
	putFixtures(t, s)
	for _, c := range filterCases {
		eventually(t, "search filter "+c.name, func() error {
			hits, err := s.Search(ctxT(t), Axis(0, 1, 0), 100, c.f)
			if err != nil {
				return err
			}
			got := ids(hits)
			for i := 1; i < len(hits); i++ {
				if hits[i].Score > hits[i-1].Score+1e-6 {
					return fmt.Errorf("not sorted by score: %v", hits)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
				return fmt.Errorf("got %q, want %q", got, c.want)
			}
			return nil
		})
	}
}

func testList(t *testing.T, s memory.Store) {
	putFixtures(t, s)
	for _, c := range filterCases {
		eventually(t, "list filter "+c.name, func() error {
			es, err := s.List(ctxT(t), c.f)
			if err != nil {
				return err
			}
			for _, e := range es {
				if e.Revision == 0 {
					return fmt.Errorf("the store's List returned %s without a revision", e.ID)
				}
			}
			if got := texts(es); !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
				return fmt.Errorf("got %q, want %q", got, c.want)
			}
			return nil
		})
	}
}

func testUpdateVector(t *testing.T, s memory.Store) {
	a := mustPut(t, s, NewEntry("coder", "mover", Axis(0, 1, 0)))
	mustPut(t, s, NewEntry("coder", "stayer", Axis(0, 1, 0.5)))
	a.Embedding = Axis(2, 3, 0)
	a.Tier = protocol.TierStrategic
	mustPut(t, s, a)
	eventually(t, "updated vector", func() error {
		hits, err := s.Search(ctxT(t), Axis(0, 1, 0), 1, memory.Filter{})
		if err != nil {
			return err
		}
		if got := ids(hits); !slices.Equal(got, []string{"stayer"}) {
			return fmt.Errorf("top hit %q after moving mover away", got)
		}
		hits, err = s.Search(ctxT(t), Axis(2, 3, 0), 10, memory.Filter{Tier: protocol.TierStrategic})
		if err != nil {
			return err
		}
		if got := ids(hits); !slices.Equal(got, []string{"mover"}) {
			return fmt.Errorf("strategic hits %q, want the promoted mover once", got)
		}
		return nil
	})
}

func testModel(t *testing.T, s memory.Store) {
	if s.Model() != Model {
		t.Fatalf("Model() = %q, want %q", s.Model(), Model)
	}
	e := NewEntry("coder", "no model set", Axis(6, 7, 0))
	e.Model = ""
	got := mustPut(t, s, e)
	back, err := s.Get(ctxT(t), got.ID)
	if err != nil {
		t.Fatal(err)
	}
	if back.Model != Model {
		t.Fatalf("entry model %q, want the store's %q", back.Model, Model)
	}
	other := NewEntry("coder", "other model", Axis(6, 7, 0))
	other.Model = "another-model"
	if _, err := s.Put(ctxT(t), other); !errors.Is(err, memory.ErrModelMismatch) {
		t.Fatalf("Put of another model's vector: %v, want ErrModelMismatch", err)
	}
}

func testBadEntries(t *testing.T, s memory.Store) {
	short := NewEntry("coder", "short vector", []float32{1, 0, 0})
	if _, err := s.Put(ctxT(t), short); err == nil {
		t.Errorf("Put of a %d-dim vector into a %d-dim store accepted", len(short.Embedding), Dim)
	}
	none := NewEntry("coder", "no vector", nil)
	if _, err := s.Put(ctxT(t), none); err == nil {
		t.Errorf("Put without an embedding accepted")
	}
	noID := NewEntry("coder", "no id", Axis(0, 1, 0))
	noID.ID = ""
	if _, err := s.Put(ctxT(t), noID); err == nil {
		t.Errorf("Put without an id accepted")
	}
}

// RunReopen checks what survives a restart and what a second replica sees.
func RunReopen(t *testing.T, backing Backing) {
	t.Run("Persists", func(t *testing.T) {
		open := backing(t)
		s1, err := open(Model, Dim)
		if err != nil {
			t.Fatal(err)
		}
		e := mustPut(t, s1, NewEntry("coder", "survive restart", Axis(0, 1, 0)))
		if err := s1.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		s2, err := open(Model, Dim)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer s2.Close()
		got, err := s2.Get(ctxT(t), e.ID)
		if err != nil || got.Revision != e.Revision {
			t.Fatalf("after reopen: %+v, %v", got, err)
		}
		eventually(t, "search after reopen", func() error {
			hits, err := s2.Search(ctxT(t), Axis(0, 1, 0), 1, memory.Filter{})
			if err != nil {
				return err
			}
			if len(hits) != 1 || hits[0].Entry.ID != e.ID {
				return fmt.Errorf("hits %v", ids(hits))
			}
			return nil
		})
	})
	t.Run("ModelMismatchRefused", func(t *testing.T) {
		open := backing(t)
		s1, err := open(Model, Dim)
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, s1, NewEntry("coder", "written by v1", Axis(0, 1, 0)))
		s1.Close()
		s2, err := open("other-model-v2", Dim)
		if err == nil {
			s2.Close()
			t.Fatalf("opened a store written by %q with another model", Model)
		}
		if !errors.Is(err, memory.ErrModelMismatch) {
			t.Fatalf("open with another model: %v, want ErrModelMismatch", err)
		}
		for _, want := range []string{Model, "other-model-v2", "skein memory migrate"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("mismatch error %q does not mention %q", err, want)
			}
		}
	})
	t.Run("ReplicasAgree", func(t *testing.T) {
		open := backing(t)
		a, err := open(Model, Dim)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := open(Model, Dim)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		e := mustPut(t, a, NewEntry("coder", "written on a", Axis(3, 4, 0)))
		eventually(t, "write on a searchable on b", func() error {
			hits, err := b.Search(ctxT(t), Axis(3, 4, 0), 1, memory.Filter{})
			if err != nil {
				return err
			}
			if len(hits) != 1 || hits[0].Entry.ID != e.ID {
				return fmt.Errorf("b sees %q", ids(hits))
			}
			return nil
		})
		// b updates with the revision a wrote; a sees the move and then the deletion.
		cur, err := b.Get(ctxT(t), e.ID)
		if err != nil {
			t.Fatal(err)
		}
		cur.Tier = protocol.TierStrategic
		if _, err := b.Put(ctxT(t), cur); err != nil {
			t.Fatalf("update on b: %v", err)
		}
		eventually(t, "update on b visible on a", func() error {
			hits, err := a.Search(ctxT(t), Axis(3, 4, 0), 1, memory.Filter{Tier: protocol.TierStrategic})
			if err != nil {
				return err
			}
			if len(hits) != 1 {
				return fmt.Errorf("a sees %q in strategic", ids(hits))
			}
			return nil
		})
		if err := b.Delete(ctxT(t), e.ID); err != nil {
			t.Fatal(err)
		}
		eventually(t, "delete on b visible on a", func() error {
			hits, err := a.Search(ctxT(t), Axis(3, 4, 0), 1, memory.Filter{Status: memory.StatusAny})
			if err != nil {
				return err
			}
			if len(hits) != 0 {
				return fmt.Errorf("a still sees %q", ids(hits))
			}
			return nil
		})
	})
}

// MigrateBacking is like Backing, with a flag to open a store whatever model wrote it.
type MigrateBacking func(t *testing.T) func(model string, dim int, anyModel bool) (memory.Store, error)

// RunMigrate checks memory.Migrate: a store written by one model becomes a store of another,
// dimension included, and refuses the old model afterwards.
func RunMigrate(t *testing.T, backing MigrateBacking) {
	open := backing(t)
	old := embedtest.Hash{Dimensions: Dim, ID: "hash-old"}
	cur := embedtest.Hash{Dimensions: 16, ID: "hash-new"}
	s1, err := open(old.Model(), old.Dim(), false)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"quote paths that contain spaces", "run go vet before committing", "retry flaky network calls"}
	vecs, _ := old.Embed(ctxT(t), texts)
	for i, x := range texts {
		e := NewEntry("coder", x, vecs[i])
		e.Model = old.Model()
		if i == 2 {
			e.Status = memory.StatusSuperseded
		}
		mustPut(t, s1, e)
	}
	s1.Close()
	if _, err := open(cur.Model(), cur.Dim(), false); !errors.Is(err, memory.ErrModelMismatch) {
		t.Fatalf("open with the new model before migrating: %v, want ErrModelMismatch", err)
	}
	s2, err := open(cur.Model(), cur.Dim(), true)
	if err != nil {
		t.Fatalf("open for migration: %v", err)
	}
	if s2.Model() != old.Model() {
		t.Fatalf("store opened for migration reports model %q, want the recorded %q", s2.Model(), old.Model())
	}
	n, err := memory.Migrate(ctxT(t), s2, cur)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if n != len(texts) {
		t.Fatalf("migrated %d entries, want %d (every status)", n, len(texts))
	}
	if s2.Model() != cur.Model() {
		t.Fatalf("after Migrate model %q, want %q", s2.Model(), cur.Model())
	}
	q, _ := cur.Embed(ctxT(t), []string{"go vet before committing"})
	eventually(t, "search with the new model", func() error {
		hits, err := s2.Search(ctxT(t), q[0], 1, memory.Filter{})
		if err != nil {
			return err
		}
		if len(hits) != 1 || hits[0].Entry.Text != texts[1] || hits[0].Entry.Model != cur.Model() {
			return fmt.Errorf("hits %+v", hits)
		}
		full, err := s2.Get(ctxT(t), hits[0].Entry.ID)
		if err != nil || len(full.Embedding) != cur.Dim() {
			return fmt.Errorf("after migrate: %d-dim vector, %v", len(full.Embedding), err)
		}
		return nil
	})
	all, err := s2.List(ctxT(t), memory.Filter{Status: memory.StatusAny})
	if err != nil || len(all) != len(texts) {
		t.Fatalf("after migrate: %d entries, %v", len(all), err)
	}
	s2.Close()
	s3, err := open(cur.Model(), cur.Dim(), false)
	if err != nil {
		t.Fatalf("reopen with the new model: %v", err)
	}
	s3.Close()
	if _, err := open(old.Model(), old.Dim(), false); !errors.Is(err, memory.ErrModelMismatch) {
		t.Fatalf("open with the old model after migrating: %v, want ErrModelMismatch", err)
	}
}

// testKinds: cases and skills live beside guidelines, travel whole, and a filter without a kind
// sees guidelines alone (so guideline code never meets a case).
func testKinds(t *testing.T, s memory.Store) {
	g := NewEntry("coder", "Pass --fix to lint.", Axis(0, 1, 0))
	c := NewEntry("coder", "Make the March sales report", Axis(0, 1, 0.1))
	c.ID, c.Kind, c.Polarity, c.Tools = "case-1", memory.KindCase, protocol.PolarityPattern, []string{"csv_read", "report"}
	c.Case = &protocol.CaseBody{Intent: c.Text, Outcome: protocol.OutcomeSuccessWithRecovery, Quality: 0.8,
		Insight: "report wants DD/MM/YYYY dates", Evidence: "date must be DD/MM/YYYY", Episode: "s1",
		Approach: []protocol.CaseStep{{Tool: "csv_read", Args: `{"path":"m.csv"}`, OK: true}, {Tool: "report", Args: `{"date":"2024-03-01"}`, Error: "date must be DD/MM/YYYY"}},
		Cost:     protocol.CaseCost{InputTokens: 1200, OutputTokens: 80, Turns: 3, ToolCalls: 3, ToolFailures: 1}}
	k := NewEntry("coder", "monthly-report: make a monthly sales report", Axis(0, 1, 0.2))
	k.ID, k.Kind, k.Polarity = "skill-1", memory.KindSkill, protocol.PolarityPattern
	k.Skill = &protocol.SkillBody{Name: "monthly-report", Version: 2, Maturity: protocol.SkillMature, Confidence: 0.8,
		Steps: []protocol.SkillStep{{Tool: "csv_read", Text: "read the month's csv"}, {Tool: "report", Text: "pass dates as DD/MM/YYYY"}},
		Cases: []string{"case-1"}, Signature: []string{"csv_read", "report"}, Confirmed: 3, Support: 2.4, Against: 0}
	for _, e := range []memory.Entry{g, c, k} {
		mustPut(t, s, e)
	}
	back, err := s.Get(ctxT(t), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if back.Kind != memory.KindCase || back.Case == nil || back.Case.Insight != c.Case.Insight || len(back.Case.Approach) != 2 ||
		back.Case.Approach[1].Error != "date must be DD/MM/YYYY" || back.Case.Cost.InputTokens != 1200 || back.Case.Quality != 0.8 {
		t.Fatalf("case round trip: %+v %+v", back, back.Case)
	}
	want := map[string][]string{"": {g.Text}, memory.KindGuideline: {g.Text}, memory.KindCase: {c.Text}, memory.KindSkill: {k.Text},
		memory.KindAny: {g.Text, c.Text, k.Text}}
	for kind, w := range want {
		w = slices.Clone(w)
		slices.Sort(w)
		eventually(t, "kind "+kind, func() error {
			hits, err := s.Search(ctxT(t), Axis(0, 1, 0), 10, memory.Filter{Agent: "coder", Kind: kind})
			if err != nil {
				return err
			}
			got := ids(hits)
			slices.Sort(got)
			if !slices.Equal(got, w) {
				return fmt.Errorf("search kind %q: %v, want %v", kind, got, w)
			}
			for _, h := range hits {
				if h.Entry.Text == k.Text && (h.Entry.Skill == nil || h.Entry.Skill.Name != "monthly-report" || len(h.Entry.Skill.Steps) != 2 || h.Entry.Kind != memory.KindSkill) {
					return fmt.Errorf("skill hit lost its body: %+v", h.Entry)
				}
			}
			es, err := s.List(ctxT(t), memory.Filter{Agent: "coder", Kind: kind})
			if err != nil {
				return err
			}
			if lids := texts(es); !slices.Equal(lids, w) {
				return fmt.Errorf("list kind %q: %v, want %v", kind, lids, w)
			}
			return nil
		})
	}
	bad := NewEntry("coder", "odd", Axis(0, 1, 0))
	bad.Kind = "profile-patch"
	if _, err := s.Put(ctxT(t), bad); err == nil {
		t.Errorf("Put of an unknown kind accepted")
	}
}
