package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/ingest"
	"github.com/skein-mesh/skein/pkg/memory/ingest/ingesttest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

const agent = "demo"

type fixture struct {
	emb   *ingesttest.Embedder
	store *ingesttest.Store
	eng   *ingest.Engine
}

func newFixture(t *testing.T, opt ingest.Options) *fixture {
	t.Helper()
	emb := ingesttest.NewEmbedder()
	st := ingesttest.NewStore(emb.Model())
	return &fixture{emb: emb, store: st, eng: ingest.New(st, emb, opt)}
}

func (f *fixture) ingest(t *testing.T, session string, c protocol.Candidate) protocol.IngestAction {
	t.Helper()
	a, err := f.eng.IngestOne(context.Background(), agent, session, c)
	if err != nil {
		t.Fatalf("ingest %s/%s: %v", session, c.Key, err)
	}
	return a
}

func (f *fixture) all(t *testing.T) []memory.Entry {
	t.Helper()
	es, err := f.store.List(context.Background(), memory.Filter{Status: memory.StatusAny})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func (f *fixture) get(t *testing.T, id string) memory.Entry {
	t.Helper()
	e, err := f.store.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return e
}

// helpful marks entry id helpful from session (as the miner does after a session that used it).
func (f *fixture) helpful(t *testing.T, id, session string) {
	t.Helper()
	if _, err := f.eng.Feedback(context.Background(), protocol.FeedbackRequest{Agent: agent, SessionID: session, Helpful: []string{id}}); err != nil {
		t.Fatal(err)
	}
}

func avoid(text, key string, tools ...string) protocol.Candidate {
	return protocol.Candidate{Text: text, Polarity: protocol.PolarityAvoid, Key: key, Tools: tools}
}

func pattern(text, key string, tools ...string) protocol.Candidate {
	return protocol.Candidate{Text: text, Polarity: protocol.PolarityPattern, Key: key, Tools: tools}
}

func TestNearDuplicateSamePolarityMerges(t *testing.T) {
	f := newFixture(t, ingest.Options{PromotionSessions: 10})
	a := "Check that the CSV path exists before calling csv_read."
	b := "Verify the csv file path exists before using csv_read."
	f.emb.Set(a, ingesttest.Axis(0, 1, 1))
	f.emb.Set(b, ingesttest.Axis(0, 0.9, 1)) // cosine 0.9 >= 0.85
	first := f.ingest(t, "s1", avoid(a, "k1", "csv_read"))
	second := f.ingest(t, "s2", avoid(b, "k1", "list_files"))
	if first.Action != ingest.ActAdded || second.Action != ingest.ActMerged || second.EntryID != first.EntryID {
		t.Fatalf("actions %+v then %+v", first, second)
	}
	es := f.all(t)
	if len(es) != 1 {
		t.Fatalf("want 1 entry, got %d", len(es))
	}
	e := es[0]
	if e.Hits != 2 || !slices.Equal(e.Sessions, []string{"s1", "s2"}) || !slices.Equal(e.Tools, []string{"csv_read", "list_files"}) {
		t.Fatalf("merged entry: hits %d sessions %v tools %v", e.Hits, e.Sessions, e.Tools)
	}
	if e.Text != a {
		t.Fatalf("merge changed the text to %q", e.Text)
	}
}

func TestBelowThresholdIsNewEntry(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	f.emb.Set("alpha guideline", ingesttest.Axis(0, 1, 1))
	f.emb.Set("beta guideline", ingesttest.Axis(0, 0.8, 2)) // cosine 0.8 < 0.85
	f.ingest(t, "s1", avoid("alpha guideline", "k"))
	if a := f.ingest(t, "s2", avoid("beta guideline", "k")); a.Action != ingest.ActAdded {
		t.Fatalf("want added, got %+v", a)
	}
	if n := len(f.all(t)); n != 2 {
		t.Fatalf("want 2 entries, got %d", n)
	}
}

func TestFailureNeverAbsorbedIntoPattern(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	text := "Call csv_read with an absolute path."
	f.ingest(t, "s1", pattern(text, "p"))
	// The very same wording as a failure lesson must stay its own entry.
	a := f.ingest(t, "s2", avoid(text, "f"))
	if a.Action != ingest.ActAdded {
		t.Fatalf("failure merged into pattern: %+v", a)
	}
	es := f.all(t)
	if len(es) != 2 {
		t.Fatalf("want 2 entries, got %d", len(es))
	}
	for _, e := range es {
		if e.Hits != 1 || len(e.Sessions) != 1 {
			t.Fatalf("entry %s (%s) counts changed: %+v", e.ID, e.Polarity, e)
		}
	}
	// And the reverse: a pattern next to a failure.
	f.emb.Set("Never pass --header to csv_read.", ingesttest.Axis(5, 1, 6))
	f.emb.Set("Pass --header to csv_read.", ingesttest.Axis(5, 0.99, 6))
	f.ingest(t, "s3", avoid("Never pass --header to csv_read.", "f2"))
	if a := f.ingest(t, "s4", pattern("Pass --header to csv_read.", "p2")); a.Action != ingest.ActAdded {
		t.Fatalf("pattern merged into failure: %+v", a)
	}
}

func TestReingestIsIdempotent(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	c := avoid("Quote paths with spaces when calling shell.", "shell|nonzero_exit|x", "shell")
	f.ingest(t, "s1", c)
	for range 3 {
		if a := f.ingest(t, "s1", c); a.Action != ingest.ActSkipped {
			t.Fatalf("re-ingest: %+v", a)
		}
	}
	es := f.all(t)
	if len(es) != 1 || es[0].Hits != 1 || len(es[0].Sessions) != 1 {
		t.Fatalf("counts inflated: %+v", es)
	}
	// A second distinct candidate of the same session bumps hits, not sessions.
	f.ingest(t, "s1", avoid(c.Text, "other-key", "shell"))
	e := f.all(t)[0]
	if e.Hits != 2 || len(e.Sessions) != 1 {
		t.Fatalf("hits %d sessions %v", e.Hits, e.Sessions)
	}
}

func TestRewordedReminingSkips(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	a, b := "Create the output directory before write_file.", "Create the output folder before calling write_file."
	f.emb.Set(a, ingesttest.Axis(3, 1, 4))
	f.emb.Set(b, ingesttest.Axis(3, 0.95, 4))
	f.ingest(t, "s1", avoid(a, "k"))
	if act := f.ingest(t, "s1", avoid(b, "k")); act.Action != ingest.ActSkipped {
		t.Fatalf("reworded re-mine: %+v", act)
	}
	if e := f.all(t)[0]; e.Hits != 1 {
		t.Fatalf("hits %d", e.Hits)
	}
}

func TestPromotionInPlace(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	c := avoid("Check the file exists before calling csv_read.", "k", "csv_read")
	var id string
	for i, s := range []string{"s1", "s2", "s2", "s3"} {
		a := f.ingest(t, s, protocol.Candidate{Text: c.Text, Polarity: c.Polarity, Key: fmt.Sprintf("k%d", i), Tools: c.Tools})
		if id == "" {
			id = a.EntryID
		}
		if a.EntryID != id {
			t.Fatalf("entry id changed: %s then %s", id, a.EntryID)
		}
		want := map[int]string{0: ingest.ActAdded, 1: ingest.ActMerged, 2: ingest.ActMerged, 3: ingest.ActPromoted}[i]
		if a.Action != want {
			t.Fatalf("step %d: want %s, got %+v", i, want, a)
		}
		if i == 1 {
			f.helpful(t, id, "used-1")
		}
	}
	es := f.all(t)
	if len(es) != 1 {
		t.Fatalf("promotion made a copy: %d entries", len(es))
	}
	if es[0].Tier != protocol.TierStrategic || es[0].ID != id || len(es[0].Sessions) != 3 || es[0].Hits != 4 {
		t.Fatalf("promoted entry: %+v", es[0])
	}
	// Further sessions merge into the strategic entry without another promotion.
	if a := f.ingest(t, "s4", c); a.Action != ingest.ActMerged || a.EntryID != id {
		t.Fatalf("after promotion: %+v", a)
	}
}

// seedStrategic writes a strategic entry directly, as a past promotion would have.
func (f *fixture) seedStrategic(t *testing.T, text string, pol protocol.Polarity, vec []float32, sessions int, helpful, harmful int) memory.Entry {
	t.Helper()
	f.emb.Set(text, vec)
	var ss []string
	for i := range sessions {
		ss = append(ss, fmt.Sprintf("old%d", i))
	}
	e := memory.Entry{ID: memory.EntryID(agent, pol, text), Agent: agent, Text: text, Polarity: pol,
		Tier: protocol.TierStrategic, Sessions: ss, Hits: sessions, Helpful: helpful, Harmful: harmful,
		Model: f.emb.Model(), Embedding: vec, Source: memory.SourceMiner, Status: memory.StatusActive,
		Created: time.Now(), Updated: time.Now()}
	e, err := f.store.Put(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// promoteCandidate ingests c from three sessions, with a helpful mark after the second (its
// evidence is then 3 sessions + 1 helpful = 4); returns the last action.
// contradiction seeds the strategic rule "Always pass --header to csv_read." with the evidence
// given, and returns it with a candidate of polarity pol that says the opposite, embedded near
// it (related, but under the merge threshold).
func (f *fixture) contradiction(t *testing.T, pol protocol.Polarity, sessions, helpful, harmful int) (memory.Entry, protocol.Candidate) {
	t.Helper()
	rule := f.seedStrategic(t, "Always pass --header to csv_read.", protocol.PolarityPattern, ingesttest.Axis(0, 1, 1), sessions, helpful, harmful)
	c := protocol.Candidate{Text: "Never pass --header to csv_read.", Polarity: pol, Key: "k", Tools: []string{"csv_read"}}
	f.emb.Set(c.Text, ingesttest.Axis(0, 0.8, 2))
	return rule, c
}

func (f *fixture) promoteCandidate(t *testing.T, c protocol.Candidate) protocol.IngestAction {
	t.Helper()
	var a protocol.IngestAction
	for _, s := range []string{"n1", "n2", "n3"} {
		if s == "n3" {
			f.helpful(t, a.EntryID, "used-n2")
		}
		a = f.ingest(t, s, c)
	}
	return a
}

func TestPromotionDuplicateIsAbsorbed(t *testing.T) {
	// A high similarity threshold keeps the candidate out of the strategic entry at merge time,
	// so the pre-promotion check is what finds the duplicate.
	f := newFixture(t, ingest.Options{SimilarityThreshold: 0.99, DuplicateFloor: 0.9})
	old := f.seedStrategic(t, "Check the path exists before csv_read.", protocol.PolarityAvoid, ingesttest.Axis(0, 1, 1), 4, 1, 0)
	c := avoid("Check that the path exists before calling csv_read.", "k", "csv_read")
	f.emb.Set(c.Text, ingesttest.Axis(0, 0.95, 2))
	a := f.promoteCandidate(t, c)
	if a.Action != ingest.ActAbsorbed || a.EntryID != old.ID {
		t.Fatalf("want absorbed into %s, got %+v", old.ID, a)
	}
	got := f.get(t, old.ID)
	if len(got.Sessions) != 7 || got.Tier != protocol.TierStrategic || got.Status != memory.StatusActive {
		t.Fatalf("strategic entry after absorb: %+v", got)
	}
	cand := f.get(t, memory.EntryID(agent, c.Polarity, c.Text))
	if cand.Status != memory.StatusSuperseded || cand.SupersededBy != old.ID || cand.Tier != protocol.TierTactical {
		t.Fatalf("candidate after absorb: %+v", cand)
	}
	// Re-mining a session that was absorbed still counts nothing.
	if a := f.ingest(t, "n2", c); a.Action != ingest.ActSkipped {
		t.Fatalf("re-mine after absorb: %+v", a)
	}
}

func TestPromotionRefinementSupersedesOld(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	old := f.seedStrategic(t, "Check the path before csv_read.", protocol.PolarityAvoid, ingesttest.Axis(0, 1, 1), 3, 0, 0)
	c := avoid("Check the path exists and is readable before csv_read.", "k")
	f.emb.Set(c.Text, ingesttest.Axis(0, 0.8, 2)) // related (>= 0.6) but below merge threshold
	a := f.promoteCandidate(t, c)
	if a.Action != ingest.ActPromoted {
		t.Fatalf("want promoted, got %+v", a)
	}
	o := f.get(t, old.ID)
	if o.Status != memory.StatusSuperseded || o.SupersededBy != a.EntryID {
		t.Fatalf("old entry: %+v", o)
	}
	n := f.get(t, a.EntryID)
	if n.Tier != protocol.TierStrategic || len(n.Sessions) != 6 {
		t.Fatalf("refinement: %+v", n)
	}
}

func TestPromotionContradictionResolvedByEvidence(t *testing.T) {
	t.Run("candidate wins", func(t *testing.T) {
		f := newFixture(t, ingest.Options{})
		old, c := f.contradiction(t, protocol.PolarityAvoid, 2, 0, 1)
		a := f.promoteCandidate(t, c)
		if a.Action != ingest.ActPromoted {
			t.Fatalf("want promoted, got %+v", a)
		}
		o := f.get(t, old.ID)
		if o.Status != memory.StatusSuperseded || o.SupersededBy != a.EntryID {
			t.Fatalf("loser must be superseded with a pointer, got %+v", o)
		}
	})
	t.Run("strategic entry wins", func(t *testing.T) {
		f := newFixture(t, ingest.Options{})
		old, c := f.contradiction(t, protocol.PolarityAvoid, 5, 4, 0)
		a := f.promoteCandidate(t, c)
		if a.Action != ingest.ActSuperseded {
			t.Fatalf("want superseded, got %+v", a)
		}
		cand := f.get(t, a.EntryID)
		if cand.Status != memory.StatusSuperseded || cand.SupersededBy != old.ID || cand.Tier != protocol.TierTactical {
			t.Fatalf("candidate: %+v", cand)
		}
		if o := f.get(t, old.ID); o.Status != memory.StatusActive {
			t.Fatalf("winner changed: %+v", o)
		}
		if len(f.all(t)) != 2 {
			t.Fatal("an entry was deleted")
		}
	})
}

type fakeModel struct {
	text  string
	calls int
}

func (m *fakeModel) Complete(_ context.Context, _ llm.Request) (*llm.Response, error) {
	m.calls++
	return &llm.Response{Text: m.text}, nil
}
func (m *fakeModel) Provider() string { return "fake" }

func TestPromotionContradictionReconciledByModel(t *testing.T) {
	model := &fakeModel{text: `{"relation":"contradiction","reconciled":"Pass --header to csv_read only for files with a header row.","reason":"both true sometimes"}`}
	f := newFixture(t, ingest.Options{Judge: ingest.ModelJudge{Backend: model}})
	old, c := f.contradiction(t, protocol.PolarityPattern, 5, 4, 0)
	a := f.promoteCandidate(t, c)
	if a.Action != ingest.ActPromoted || model.calls == 0 {
		t.Fatalf("want promoted after a model call, got %+v (calls %d)", a, model.calls)
	}
	n := f.get(t, a.EntryID)
	if n.Text != "Pass --header to csv_read only for files with a header row." || n.ID != memory.EntryID(agent, c.Polarity, c.Text) {
		t.Fatalf("reconciled entry: %+v", n)
	}
	if o := f.get(t, old.ID); o.Status != memory.StatusSuperseded || o.SupersededBy != n.ID {
		t.Fatalf("old entry: %+v", o)
	}
}

func TestModelJudgeFallsBackToRules(t *testing.T) {
	model := &fakeModel{text: "I think they are kind of similar"}
	j := ingest.ModelJudge{Backend: model}
	a := memory.Entry{Text: "Never pass --header to csv_read.", Polarity: protocol.PolarityAvoid}
	b := memory.Entry{Text: "Always pass --header to csv_read.", Polarity: protocol.PolarityPattern}
	v, err := j.Judge(context.Background(), a, b, 0.8)
	if err != nil || v.Relation != ingest.Contradiction {
		t.Fatalf("fallback verdict %+v, %v", v, err)
	}
	// A model may not call entries of different polarity duplicates.
	model.text = `{"relation":"duplicate"}`
	if v, _ := j.Judge(context.Background(), a, b, 0.99); v.Relation != ingest.Independent {
		t.Fatalf("cross-polarity duplicate accepted: %+v", v)
	}
}

func TestRuleJudge(t *testing.T) {
	j := ingest.RuleJudge{DuplicateFloor: 0.92}
	e := func(text string, p protocol.Polarity) memory.Entry { return memory.Entry{Text: text, Polarity: p} }
	av, pa := protocol.PolarityAvoid, protocol.PolarityPattern
	cases := []struct {
		name  string
		a, b  memory.Entry
		score float64
		want  ingest.Relation
	}{
		{"negation", e("Do not retry fetch_url on 404 errors.", av), e("Retry fetch_url on 404 errors.", pa), 0.8, ingest.Contradiction},
		{"antonym", e("Use relative paths with csv_read.", pa), e("Use absolute paths with csv_read.", pa), 0.8, ingest.Contradiction},
		{"enable/disable", e("Disable caching in http_get for live prices.", av), e("Enable caching in http_get for live prices.", av), 0.8, ingest.Contradiction},
		{"duplicate", e("Check the path before csv_read.", av), e("Check the path first before csv_read.", av), 0.95, ingest.Duplicate},
		{"refinement", e("Check the path exists and is readable before csv_read.", av), e("Check the path before csv_read.", av), 0.8, ingest.Refinement},
		{"independent", e("Set a timeout on fetch_url.", av), e("Check the path before csv_read.", av), 0.7, ingest.Independent},
		{"different polarity, no opposition", e("Check the path before csv_read.", av), e("Check the path before csv_read.", pa), 0.99, ingest.Independent},
		{"different subject with negation", e("Never call delete_file on /etc.", av), e("Summarize the csv with pandas_tool.", pa), 0.65, ingest.Independent},
		{"quoted error is not wording", e(`Call csv_read with {"path":"/data/x.csv"}.`, pa), e(`Avoid calling csv_read with {"path":"/data/x.csv"}: it failed with "no such file: /data/x.csv"`, av), 0.8, ingest.Contradiction},
		{"double negative agrees", e("Never call deploy without --dry-run first.", av), e("Call deploy with --dry-run first.", pa), 0.8, ingest.Independent},
	}
	for _, c := range cases {
		v, err := j.Judge(context.Background(), c.a, c.b, c.score)
		if err != nil || v.Relation != c.want {
			t.Errorf("%s: want %s, got %+v (%v)", c.name, c.want, v, err)
		}
	}
}

func TestConflictIsRetried(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	c := avoid("Check the path before csv_read.", "k")
	f.ingest(t, "s1", c)
	// A concurrent writer bumps the entry's revision right before our first write.
	var once sync.Once
	var raced bool
	f.store.BeforePut = func(e memory.Entry) error {
		var err error
		once.Do(func() {
			f.store.BeforePut = nil
			cur, _ := f.store.Get(context.Background(), e.ID)
			cur.Helpful++
			_, err = f.store.Put(context.Background(), cur)
			raced = true
		})
		return err
	}
	if a := f.ingest(t, "s2", c); a.Action != ingest.ActMerged {
		t.Fatalf("after conflict: %+v", a)
	}
	e := f.all(t)[0]
	if !raced || e.Helpful != 1 || len(e.Sessions) != 2 {
		t.Fatalf("concurrent write lost or session dropped: raced=%v %+v", raced, e)
	}
}

func TestConcurrentReplicasAgree(t *testing.T) {
	f := newFixture(t, ingest.Options{PromotionSessions: 100})
	c := avoid("Check the path before csv_read.", "k")
	engines := []*ingest.Engine{ingest.New(f.store, f.emb, ingest.Options{PromotionSessions: 100}), f.eng}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every session is sent twice, by different replicas.
			for r := range 2 {
				if _, err := engines[(i+r)%2].IngestOne(context.Background(), agent, fmt.Sprintf("s%d", i), c); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	es := f.all(t)
	if len(es) != 1 || es[0].Hits != 20 || len(es[0].Sessions) != 20 {
		t.Fatalf("want one entry with 20 sessions and hits, got %d entries: %+v", len(es), es)
	}
}

func TestPermanentErrorIsNotRetried(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	boom := errors.New("disk full")
	f.store.BeforePut = func(memory.Entry) error { return boom }
	_, err := f.eng.IngestOne(context.Background(), agent, "s1", avoid("x y z", "k"))
	if !errors.Is(err, boom) {
		t.Fatalf("want disk full, got %v", err)
	}
}

func TestFeedbackCountsOncePerSession(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	a := f.ingest(t, "s1", avoid("Check the path before csv_read.", "k"))
	b := f.ingest(t, "s1", pattern("List files, then read the csv with csv_read.", "p"))
	req := protocol.FeedbackRequest{Agent: agent, SessionID: "s9", Helpful: []string{a.EntryID, b.EntryID}, Followed: []string{a.EntryID}}
	for range 2 {
		if _, err := f.eng.Feedback(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if e := f.get(t, a.EntryID); e.Helpful != 2 || e.LastUsed.IsZero() {
		t.Fatalf("followed entry: helpful %d", e.Helpful)
	}
	if e := f.get(t, b.EntryID); e.Helpful != 1 {
		t.Fatalf("helpful entry: %d", e.Helpful)
	}
	if _, err := f.eng.Feedback(context.Background(), protocol.FeedbackRequest{Agent: agent, SessionID: "s10", Harmful: []string{b.EntryID, "missing"}}); err != nil {
		t.Fatal(err)
	}
	if e := f.get(t, b.EntryID); e.Harmful != 1 {
		t.Fatalf("harmful: %d", e.Harmful)
	}
}

func TestEvictLeastHelpfulThenLeastRecent(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := newFixture(t, ingest.Options{Capacity: 2, Now: func() time.Time { return now }})
	ids := map[string]string{}
	for i, name := range []string{"old-helpful", "new-neutral", "old-neutral", "harmful"} {
		now = now.Add(time.Hour)
		a := f.ingest(t, fmt.Sprintf("s%d", i), avoid(fmt.Sprintf("%s guideline about tool%d", name, i), "k"))
		ids[name] = a.EntryID
	}
	ctx := context.Background()
	must := func(_ int, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.eng.Feedback(ctx, protocol.FeedbackRequest{SessionID: "f1", Helpful: []string{ids["old-helpful"]}, Harmful: []string{ids["harmful"]}}))
	// Make "new-neutral" the most recently used neutral entry.
	e := f.get(t, ids["new-neutral"])
	e.LastUsed = now.Add(time.Hour)
	if _, err := f.store.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	dry, err := f.eng.Evict(ctx, agent, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry) != 2 || dry[0].ID != ids["harmful"] || dry[1].ID != ids["old-neutral"] {
		t.Fatalf("dry run picked %+v", dry)
	}
	if n := len(f.all(t)); n != 4 {
		t.Fatalf("dry run removed entries: %d left", n)
	}
	got, err := f.eng.Evict(ctx, agent, false)
	if err != nil || len(got) != 2 {
		t.Fatalf("evict: %v %+v", err, got)
	}
	left := f.all(t)
	if len(left) != 2 {
		t.Fatalf("%d left", len(left))
	}
	for _, e := range left {
		if e.ID != ids["old-helpful"] && e.ID != ids["new-neutral"] {
			t.Fatalf("kept the wrong entry: %s", e.Text)
		}
	}
}

func TestOppositeAdviceIsNeverMerged(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	a, b := "Use relative paths with csv_read.", "Use absolute paths with csv_read."
	f.emb.Set(a, ingesttest.Axis(0, 1, 1))
	f.emb.Set(b, ingesttest.Axis(0, 0.97, 2)) // as close as MiniLM puts them
	f.ingest(t, "s1", pattern(a, "k"))
	if act := f.ingest(t, "s2", pattern(b, "k")); act.Action != ingest.ActAdded {
		t.Fatalf("contradicting pattern merged: %+v", act)
	}
}

func TestContradictionTieDefersPromotion(t *testing.T) {
	f := newFixture(t, ingest.Options{})
	old, c := f.contradiction(t, protocol.PolarityAvoid, 3, 1, 0)
	if a := f.promoteCandidate(t, c); a.Action != ingest.ActDeferred {
		t.Fatalf("want deferred, got %+v", a)
	}
	cand := f.get(t, memory.EntryID(agent, c.Polarity, c.Text))
	if cand.Status != memory.StatusActive || cand.Tier != protocol.TierTactical || len(cand.Sessions) != 3 {
		t.Fatalf("candidate after tie: %+v", cand)
	}
	// One more session tips the evidence.
	if a := f.ingest(t, "n4", c); a.Action != ingest.ActPromoted {
		t.Fatalf("after more evidence: %+v", a)
	}
	if o := f.get(t, old.ID); o.Status != memory.StatusSuperseded || o.SupersededBy != cand.ID {
		t.Fatalf("old: %+v", o)
	}
}

// An entry learned from many sessions keeps counts plus the last session ids and markers, so it
// stays a small message however long the mesh runs.
func TestEvidenceStaysBounded(t *testing.T) {
	f := newFixture(t, ingest.Options{PromotionSessions: 1 << 20})
	c := avoid("Quote paths with spaces when calling shell.", "shell|nonzero_exit|x", "shell")
	const n = 400
	for i := range n {
		f.ingest(t, fmt.Sprintf("s%d", i), c)
	}
	// Re-mining a recent session still changes nothing.
	if a := f.ingest(t, fmt.Sprintf("s%d", n-1), c); a.Action != ingest.ActSkipped {
		t.Fatalf("re-ingest of a recent session: %+v", a)
	}
	es := f.all(t)
	if len(es) != 1 {
		t.Fatalf("%d entries", len(es))
	}
	e := es[0]
	if e.DistinctSessions() != n || e.Hits != n {
		t.Fatalf("distinct sessions %d hits %d, want %d", e.DistinctSessions(), e.Hits, n)
	}
	if len(e.Sessions) != protocol.MaxEvidenceSessions || e.Sessions[len(e.Sessions)-1] != fmt.Sprintf("s%d", n-1) {
		t.Fatalf("kept %d session ids (last %v), want the last %d", len(e.Sessions), e.Sessions[len(e.Sessions)-1:], protocol.MaxEvidenceSessions)
	}
	if len(e.Mined) > protocol.MaxEvidenceMarkers {
		t.Fatalf("kept %d markers, want at most %d", len(e.Mined), protocol.MaxEvidenceMarkers)
	}
	e.Embedding = nil
	data, err := msgpack.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 32<<10 {
		t.Fatalf("entry is %d bytes after %d sessions", len(data), n)
	}
}
