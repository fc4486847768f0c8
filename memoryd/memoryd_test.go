package memoryd_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// start runs memoryd on the test mesh and returns a client once it serves.
func start(t testing.TB, m *bustest.Mesh, emb embed.Embedder, cfg *config.Config) memoryd.Client {
	c, _ := startStoppable(t, m, emb, cfg)
	return c
}

func startStoppable(t testing.TB, m *bustest.Mesh, emb embed.Embedder, cfg *config.Config) (memoryd.Client, func()) {
	t.Helper()
	stop := runMemoryd(t, m, memoryd.Deps{Config: cfg, Embedder: emb}, nil)
	return memoryd.Client{NC: m.Conn.NC, Names: m.Names, PerTry: 10 * time.Second}, stop
}

// runMemoryd runs memoryd with d on a connection of its own to m (names: the mesh's unless d
// says; config: the default unless d says) until the test ends, and returns once it serves;
// stop ends it sooner. With logs, memoryd logs there, and a start that fails shows them.
func runMemoryd(t testing.TB, m *bustest.Mesh, d memoryd.Deps, logs *devtest.LogBuffer) (stop func()) {
	t.Helper()
	if d.Names == (protocol.Names{}) {
		d.Names = m.Names
	}
	if d.Config == nil {
		d.Config = config.Default()
	}
	shown := func() string { return "" }
	if logs != nil {
		d.Logger = slog.New(slog.NewTextHandler(logs, nil))
		shown = func() string { return "\n" + logs.String() }
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	d.Conn, d.Ready = m.Connect(t, "memoryd"), ready
	go func() { done <- memoryd.Run(ctx, d) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("memoryd.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-ready:
	case err := <-done:
		once.Do(func() {})
		t.Fatalf("memoryd stopped: %v%s", err, shown())
	case <-time.After(3 * time.Minute): // a Milvus store reconciles with its records first
		t.Fatalf("memoryd did not start%s", shown())
	}
	return stop
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const guideline = "Check that the CSV file exists with list_files before calling csv_read."

func TestEndpointsOverTheBus(t *testing.T) {
	m := bustest.Start(t)
	c := start(t, m, embedtest.Hash{}, nil)
	ctx := ctxT(t)

	h, err := c.Health(ctx)
	if err != nil || !h.OK || h.Store != "kv" || h.Entries != 0 {
		t.Fatalf("health: %+v %v", h, err)
	}
	gs, err := c.Retrieve(ctx, protocol.RetrieveRequest{Agent: "demo", Task: "summarize /data/x.csv"})
	if err != nil || gs == nil || len(gs) != 0 {
		t.Fatalf("retrieve on empty store: %v %v", gs, err)
	}

	cand := protocol.Candidate{Text: guideline, Polarity: protocol.PolarityAvoid, Tools: []string{"csv_read"}, Key: "csv_read|tool_error|no such file"}
	var last []protocol.IngestAction
	for _, s := range []string{"s1", "s2", "s2", "s3"} {
		if s == "s3" {
			// s2 used the lesson and succeeded: a helpful mark, which promotion needs.
			if err := c.Feedback(ctx, protocol.FeedbackRequest{Agent: "demo", SessionID: "s2", Helpful: []string{last[0].EntryID}}); err != nil {
				t.Fatal(err)
			}
		}
		last, err = c.Ingest(ctx, protocol.IngestRequest{Agent: "demo", SessionID: s, Candidates: []protocol.Candidate{cand}})
		if err != nil {
			t.Fatalf("ingest %s: %v", s, err)
		}
	}
	if len(last) != 1 || last[0].Action != "promoted" {
		t.Fatalf("third distinct session: %+v", last)
	}
	id := last[0].EntryID

	ins, err := c.Inspect(ctx, protocol.MemoryInspectRequest{Agent: "demo", Query: "read the csv file", TopK: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(ins.Counts) != 1 || ins.Counts[0].Tier != protocol.TierStrategic || ins.Counts[0].N != 1 {
		t.Fatalf("counts %+v", ins.Counts)
	}
	if len(ins.Hits) != 1 || ins.Hits[0].Entry.ID != id || ins.Hits[0].Score <= 0 || ins.Hits[0].Entry.Embedding != nil {
		t.Fatalf("hits %+v", ins.Hits)
	}

	gs, err = c.Retrieve(ctx, protocol.RetrieveRequest{Agent: "demo", Task: "Read /data/x.csv with csv_read and check the file", Tools: []string{"csv_read"}})
	if err != nil || len(gs) != 1 || gs[0].ID != id || gs[0].Tier != protocol.TierStrategic {
		t.Fatalf("retrieve: %+v %v", gs, err)
	}

	if err := c.Feedback(ctx, protocol.FeedbackRequest{Agent: "demo", SessionID: "s4", Followed: []string{id}}); err != nil {
		t.Fatal(err)
	}
	e, err := c.Get(ctx, id)
	if err != nil || e.Helpful != 3 || len(e.Sessions) != 3 || e.Hits != 3 { // 1 (s2) + 2 (followed in s4)
		t.Fatalf("get: %+v %v", e, err)
	}
	if _, err := c.Get(ctx, "nope"); err == nil {
		t.Fatal("get of a missing id did not fail")
	}

	list, err := c.ListAll(ctx, protocol.MemoryListRequest{Status: memory.StatusAny})
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %d %v", len(list), err)
	}

	ev, err := c.Evict(ctx, protocol.MemoryEvictRequest{DryRun: true})
	if err != nil || len(ev.Evicted) != 0 || !ev.DryRun {
		t.Fatalf("evict: %+v %v", ev, err)
	}

	vecs, err := c.Embed(ctx, []string{"a", "b c"})
	if err != nil || len(vecs) != 2 || len(vecs[0]) != 64 {
		t.Fatalf("embed: %v %v", len(vecs), err)
	}
}

func TestImportExportRoundTrip(t *testing.T) {
	m := bustest.Start(t)
	c := start(t, m, embedtest.Hash{}, nil)
	ctx := ctxT(t)
	in := []memory.Entry{
		{Agent: "demo", Text: "Use absolute paths with csv_read.", Polarity: protocol.PolarityPattern, Tier: protocol.TierStrategic, Sessions: []string{"a", "b", "c"}},
		{Agent: "demo", Text: "Never retry fetch_url on a 404.", Polarity: protocol.PolarityAvoid},
		{Agent: "bad agent", Text: "x", Polarity: protocol.PolarityAvoid},
	}
	rep, err := c.Import(ctx, protocol.MemoryImportRequest{Entries: in})
	if err != nil || rep.Imported != 2 || rep.Skipped != 1 || len(rep.Problems) != 1 {
		t.Fatalf("import: %+v %v", rep, err)
	}
	out, err := c.ListAll(ctx, protocol.MemoryListRequest{Agent: "demo"})
	if err != nil || len(out) != 2 || out[0].Tier != protocol.TierStrategic || out[0].Model != (embedtest.Hash{}).Model() {
		t.Fatalf("export: %+v %v", out, err)
	}
	// Importing the export again changes nothing; with replace it rewrites.
	rep, err = c.Import(ctx, protocol.MemoryImportRequest{Entries: out})
	if err != nil || rep.Imported != 0 || rep.Skipped != 2 {
		t.Fatalf("re-import: %+v %v", rep, err)
	}
	rep, err = c.Import(ctx, protocol.MemoryImportRequest{Entries: out, Replace: true})
	if err != nil || rep.Imported != 2 {
		t.Fatalf("replace: %+v %v", rep, err)
	}
	// Retrieval finds imported entries: they were embedded on the way in.
	gs, err := c.Retrieve(ctx, protocol.RetrieveRequest{Agent: "demo", Task: "use csv_read with absolute paths"})
	if err != nil || len(gs) == 0 {
		t.Fatalf("retrieve imported: %v %v", gs, err)
	}
}

func TestMigrateAfterModelChange(t *testing.T) {
	m := bustest.Start(t)
	ctx := ctxT(t)
	func() {
		old := embedtest.Hash{ID: "old-model"}
		c, stop := startStoppable(t, m, old, nil)
		defer stop()
		if _, err := c.Ingest(ctx, protocol.IngestRequest{Agent: "demo", SessionID: "s1",
			Candidates: []protocol.Candidate{{Text: guideline, Polarity: protocol.PolarityAvoid, Key: "k"}}}); err != nil {
			t.Fatal(err)
		}
	}()
	// A second memoryd with another model joins the same bucket: it serves, but refuses to mix
	// vectors until the store is migrated.
	c := start(t, m, embedtest.Hash{ID: "new-model"}, nil)
	h, err := c.Health(ctx)
	if err != nil || h.OK || h.Error == "" {
		t.Fatalf("health before migrate: %+v %v", h, err)
	}
	if _, err := c.Retrieve(ctx, protocol.RetrieveRequest{Agent: "demo", Task: "csv"}); err == nil {
		t.Fatal("retrieve on a stale store did not fail")
	}
	mr, err := c.Migrate(ctx)
	if err != nil || mr.Reembedded != 1 || mr.Model != "new-model" {
		t.Fatalf("migrate: %+v %v", mr, err)
	}
	if h, _ := c.Health(ctx); !h.OK || h.Entries != 1 {
		t.Fatalf("health after migrate: %+v", h)
	}
}

// With no embedder injected, memoryd opens the configured one: all-MiniLM-L6-v2 in process.
func TestRealEmbedderFromConfig(t *testing.T) {
	if _, err := minilm.Open(minilm.Options{}); err != nil {
		devtest.Missing(t, fmt.Sprintf("all-MiniLM-L6-v2 (%v)", err))
	}
	m := bustest.Start(t)
	c := start(t, m, nil, nil) // nil: memoryd opens memory.embedder (minilm)
	ctx := ctxT(t)
	h, err := c.Health(ctx)
	if err != nil || h.Model != minilm.ModelID || h.Dim != 384 {
		t.Fatalf("health %+v %v", h, err)
	}
	for _, s := range []string{"s1", "s2", "s3"} {
		acts, err := c.Ingest(ctx, protocol.IngestRequest{Agent: "demo", SessionID: s, Candidates: []protocol.Candidate{
			{Text: `Avoid calling csv_read with {"path":"/data/x.csv"}: it failed with "no such file: /data/x.csv"`,
				Polarity: protocol.PolarityAvoid, Tools: []string{"csv_read"}, Key: "k"},
			{Text: "Set a timeout when calling fetch_url on slow hosts.", Polarity: protocol.PolarityAvoid, Tools: []string{"fetch_url"}, Key: "t"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if s == "s2" {
			// Only the csv lesson helped a session: only it is promoted.
			if err := c.Feedback(ctx, protocol.FeedbackRequest{Agent: "demo", SessionID: s, Helpful: []string{acts[0].EntryID}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	gs, err := c.Retrieve(ctx, protocol.RetrieveRequest{Agent: "demo", Task: "Summarize the sales in /data/x.csv", Tools: []string{"csv_read", "fetch_url"}})
	if err != nil || len(gs) != 1 || gs[0].Tier != protocol.TierStrategic || gs[0].Tools[0] != "csv_read" {
		t.Fatalf("retrieve: %+v %v", gs, err)
	}
}

// remember stores notes from inside a session under the rules of mined guidelines: redacted,
// capped, tactical, counted once per (session, key), with their origin kept; bad requests are
// refused with the reason.
func TestRememberStoresNotesLikeGuidelines(t *testing.T) {
	m := bustest.Start(t)
	c := start(t, m, embedtest.Hash{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := protocol.RememberRequest{Agent: "boss", SessionID: "a-child1", Source: protocol.SourceSubagent, SourceAgent: "scout",
		Notes: []protocol.RememberNote{
			{Key: "finding:answer", Text: "The archive key is sk-ant-api03-AbCdEf0123456789xyz for the vault."},
			{Key: "finding:long", Text: strings.Repeat("word ", 200)},
		}}
	acts, err := c.Remember(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 2 || acts[0].Action != "added" || acts[1].Action != "refused" || !strings.Contains(acts[1].Detail, "at most") {
		t.Fatalf("actions = %+v, want the first added and the long one refused", acts)
	}
	e, err := c.Get(ctx, acts[0].EntryID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.Text, "AbCdEf0123456789xyz") || e.Source != protocol.SourceSubagent || e.SourceAgent != "scout" ||
		e.SourceSession != "a-child1" || e.Tier != protocol.TierTactical {
		t.Fatalf("stored %+v, want the key redacted and the origin kept", e)
	}
	// The same finish again writes nothing twice.
	acts, err = c.Remember(ctx, req)
	if err != nil || acts[0].Action != "skipped" {
		t.Fatalf("repeat: %+v, %v; want skipped", acts, err)
	}
	if again, _ := c.Get(ctx, e.ID); again.Hits != e.Hits || again.DistinctSessions() != 1 {
		t.Fatalf("repeat counted: %+v", again)
	}

	for name, bad := range map[string]protocol.RememberRequest{
		"unknown source":   {Agent: "boss", SessionID: "s1", Source: "miner", Notes: req.Notes[:1]},
		"subagent no name": {Agent: "boss", SessionID: "s1", Source: protocol.SourceSubagent, Notes: req.Notes[:1]},
		"no notes":         {Agent: "boss", SessionID: "s1", Source: protocol.SourceRemembered},
		"bad agent":        {Agent: "a b", SessionID: "s1", Source: protocol.SourceRemembered, Notes: req.Notes[:1]},
	} {
		if _, err := c.Remember(ctx, bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
