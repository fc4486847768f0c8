package miner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/miner"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

type env struct {
	m   *bustest.Mesh
	cfg *config.Config
	mem memoryd.Client
}

func setup(t *testing.T) *env {
	t.Helper()
	m := bustest.Start(t)
	cfg := config.Default()
	return &env{m: m, cfg: cfg, mem: startMemoryd(t, m, memoryd.Deps{Config: cfg, Embedder: embedtest.Hash{}}, 10*time.Second)}
}

func (e *env) deps(t *testing.T) miner.Deps {
	return miner.Deps{Conn: e.m.Conn, Names: e.m.Names, Config: e.cfg, NoModel: true}
}

// publish writes a synthetic session trace: a csv_read that fails with a real error, then the
// final and usage events.
func (e *env) publish(t *testing.T, session string, extra ...protocol.Event) {
	t.Helper()
	evs := []protocol.Event{
		{Type: protocol.EvSessionStarted, Agent: "demo", Task: "Summarize the sales in /data/x.csv"},
		{Type: protocol.EvToolCall, Tool: "csv_read", Args: json.RawMessage(`{"path":"/data/x.csv"}`), Result: &protocol.ToolResult{
			OK: false, Kind: protocol.ToolErrToolError, Error: "no such file: /data/x.csv",
			Stderr: "opening input\nFileNotFoundError: [Errno 2] No such file or directory: '/data/x.csv'"}},
	}
	evs = append(evs, extra...)
	evs = append(evs,
		protocol.Event{Type: protocol.EvFinal, Outcome: protocol.OutcomeIncompleteToolFail},
		protocol.Event{Type: protocol.EvUsage, Report: &protocol.UsageReport{}})
	sessiontest.Publish(t, e.m.Conn, e.m.Names, session, evs...)
}

func (e *env) entries(t *testing.T) []memory.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := e.mem.ListAll(ctx, protocol.MemoryListRequest{Status: memory.StatusAny})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func TestMineSessionCarriesRealErrorAndIsIdempotent(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e.publish(t, "sess-1")
	res, err := miner.MineSession(ctx, e.deps(t), "sess-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Candidates) != 1 || !strings.Contains(res.Candidates[0].Text, "no such file: /data/x.csv") ||
		res.Candidates[0].Polarity != protocol.PolarityAvoid || res.Agent != "demo" {
		t.Fatalf("candidates %+v", res.Candidates)
	}
	if len(res.Actions) != 1 || res.Actions[0].Action != "added" {
		t.Fatalf("actions %+v", res.Actions)
	}
	for range 2 {
		again, err := miner.MineSession(ctx, e.deps(t), "sess-1")
		if err != nil {
			t.Fatal(err)
		}
		if again.Actions[0].Action != "skipped" || again.Candidates[0].Text != res.Candidates[0].Text {
			t.Fatalf("re-mine: %+v", again.Actions)
		}
	}
	es := e.entries(t)
	if len(es) != 1 || es[0].Hits != 1 || len(es[0].Sessions) != 1 {
		t.Fatalf("re-mining inflated counts: %+v", es)
	}
	// Re-mining published nothing twice: one mined and one miner usage event in the trace, one
	// mining total in USAGE.
	evs := sessiontest.Events(t, e.m.Conn, e.m.Names, "sess-1")
	closing := 0
	for _, ev := range evs {
		if ev.Role == protocol.RoleMiner && (ev.Type == protocol.EvMined || ev.Type == protocol.EvUsage) {
			closing++
		}
	}
	if closing != 2 {
		t.Fatalf("%d mined/usage events by the miner after three mines, want 2 (one pair)", closing)
	}
	us, err := e.m.Conn.JS.Stream(ctx, e.m.Names.Stream(protocol.StreamUsage))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := us.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("USAGE holds %v messages (%v), want 1", info.State.Msgs, err)
	}
	if _, err := miner.MineSession(ctx, e.deps(t), "no-such-session"); err == nil {
		t.Fatal("mining a missing session did not fail")
	}
}

func TestDurableConsumerPromotesAfterThreeSessionsAndReplayIsIdempotent(t *testing.T) {
	e := setup(t)
	ready := make(chan struct{})
	d := e.deps(t)
	d.Ready = ready
	bustest.RunRoles(t, e.m).GoReady("miner", ready, func(ctx context.Context) error { return miner.Run(ctx, d) })
	for i := range 3 {
		e.publish(t, fmt.Sprintf("run-%d", i))
	}
	var es []memory.Entry
	poll.Eventually(t, 30*time.Second, "one lesson from 3 sessions", func() error {
		if es = e.entries(t); len(es) != 1 || es[0].DistinctSessions() != 3 {
			return fmt.Errorf("entries %+v", es)
		}
		return nil
	})
	// Recurrence alone does not promote it.
	if es[0].Tier != protocol.TierTactical {
		t.Fatalf("promoted without a helpful mark: %+v", es[0])
	}
	// A session that used it (read another file with csv_read) and succeeded marks it helpful
	// (and followed): that promotes it.
	sessiontest.Publish(t, e.m.Conn, e.m.Names, "used",
		protocol.Event{Type: protocol.EvSessionStarted, Agent: "demo", Task: "Summarize the sales in /data/y.csv"},
		protocol.Event{Type: protocol.EvRetrieval, Guidelines: []protocol.Guideline{{ID: es[0].ID, Text: es[0].Text, Polarity: es[0].Polarity, Tools: es[0].Tools, Tier: es[0].Tier}}},
		protocol.Event{Type: protocol.EvToolCall, Tool: "csv_read", Args: json.RawMessage(`{"path":"/data/y.csv"}`), Result: &protocol.ToolResult{OK: true, Result: json.RawMessage(`{"rows":3}`)}},
		protocol.Event{Type: protocol.EvFinal, Outcome: protocol.OutcomeSuccess},
		protocol.Event{Type: protocol.EvUsage, Report: &protocol.UsageReport{}})
	poll.Eventually(t, 30*time.Second, "the lesson promoted after its helpful mark", func() error {
		for _, x := range e.entries(t) {
			if x.ID == es[0].ID {
				if x.Tier != protocol.TierStrategic || x.Helpful != 2 || x.Echoes != 1 {
					return fmt.Errorf("lesson %+v", x)
				}
				es[0] = x
				return nil
			}
		}
		return fmt.Errorf("lesson %s is gone", es[0].ID)
	})
	rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer rcancel()
	// A fourth session's retrieval puts the lesson, with the tool's real error, in the cached
	// strategic block of the prompt.
	gs, err := e.mem.Retrieve(rctx, protocol.RetrieveRequest{Agent: "demo", Task: "Summarize the sales in /data/x.csv", Tools: []string{"csv_read"}})
	if err != nil || len(gs) == 0 || gs[0].ID != es[0].ID || gs[0].Tier != protocol.TierStrategic {
		t.Fatalf("retrieve: %+v %v", gs, err)
	}
	strategic, tactical := retrieve.Render(gs)
	if !strings.Contains(strategic, "no such file: /data/x.csv") || strings.Contains(tactical, "no such file") {
		t.Fatalf("rendered:\n%s\n%s", strategic, tactical)
	}
	results, err := miner.Replay(rctx, e.deps(t), time.Hour, 0)
	if err != nil || len(results) != 4 {
		t.Fatalf("replay: %d results, %v", len(results), err)
	}
	results, err = miner.Replay(rctx, e.deps(t), 0, 1)
	if err != nil || len(results) != 4 {
		t.Fatalf("replay from seq: %d results, %v", len(results), err)
	}
	var after memory.Entry
	for _, x := range e.entries(t) {
		if x.ID == es[0].ID {
			after = x
		}
	}
	if after.Hits != es[0].Hits || len(after.Sessions) != 3 || after.Helpful != es[0].Helpful || after.Echoes != 1 {
		t.Fatalf("replay inflated counts: before %+v after %+v", es[0], after)
	}
}

func TestFeedbackReachesMemory(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e.publish(t, "a")
	if _, err := miner.MineSession(ctx, e.deps(t), "a"); err != nil {
		t.Fatal(err)
	}
	g := e.entries(t)[0]
	// Session b retrieved that guideline and did what it warned against (the same path), failing
	// the way it said: ignored, so it fizzles; not harmful, since the failure confirms it.
	e.publish(t, "b", protocol.Event{Type: protocol.EvRetrieval, Guidelines: []protocol.Guideline{
		{ID: g.ID, Text: g.Text, Polarity: g.Polarity, Tools: g.Tools, Tier: g.Tier}}})
	res, err := miner.MineSession(ctx, e.deps(t), "b")
	if err != nil || len(res.Feedback.Fizzle) != 1 || len(res.Feedback.Harmful) != 0 {
		t.Fatalf("feedback %+v %v", res.Feedback, err)
	}
	if _, err := miner.MineSession(ctx, e.deps(t), "b"); err != nil {
		t.Fatal(err)
	}
	got, err := e.mem.Get(ctx, g.ID)
	if err != nil || got.Fizzles != 1 || got.Utility >= 0 || got.Harmful != 0 || got.DistinctSessions() != 2 {
		t.Fatalf("after session b: %+v %v", got, err)
	}
}

// chatty is a model double that answers over the cap first, to exercise regeneration.
type chatty struct {
	mu      sync.Mutex
	answers []string
	calls   int
}

func (c *chatty) Complete(_ context.Context, req llm.Request) (*llm.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.Role != protocol.RoleMiner || !strings.HasPrefix(req.System[0].Text, miner.SystemMarker) {
		return nil, fmt.Errorf("not a miner request: role %q", req.Role)
	}
	a := c.answers[min(c.calls, len(c.answers)-1)]
	c.calls++
	return &llm.Response{Text: a, Model: "chatty-1", Usage: protocol.Usage{InputTokens: 100, OutputTokens: int64(tokenize.Count(a))}}, nil
}
func (c *chatty) Provider() string { return "test" }

func TestCompressionRegeneratesThenCutsAndCountsTokens(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	long := "Before you call csv_read " + strings.Repeat("please make very sure that the file path really exists on disk ", 4)
	model := &chatty{answers: []string{long, long}}
	d := e.deps(t)
	d.NoModel, d.Model = false, model
	e.publish(t, "m1")
	res, err := miner.MineSession(ctx, d, "m1")
	if err != nil {
		t.Fatal(err)
	}
	text := res.Candidates[0].Text
	if model.calls != 2 || tokenize.Count(text) > 30 || !strings.HasPrefix(text, "Before you call csv_read") {
		t.Fatalf("calls %d, text %q (%d tokens)", model.calls, text, tokenize.Count(text))
	}
	if res.Usage.InputTokens != 200 {
		t.Fatalf("usage %+v", res.Usage)
	}
	evs := sessiontest.Events(t, e.m.Conn, e.m.Names, "m1")
	n := 0
	for _, ev := range evs {
		if ev.Type == protocol.EvModelCall && ev.Role == protocol.RoleMiner && ev.Usage != nil && ev.Model == "chatty-1" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("want 2 miner model_call events, got %d", n)
	}
	// The session's usage report is republished with the mining tokens in it.
	st, err := e.m.Conn.JS.Stream(ctx, e.m.Names.Stream(protocol.StreamUsage))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(ctx, e.m.Names.Usage("demo"))
	if err != nil {
		t.Fatal(err)
	}
	var uev protocol.Event
	if err := protocol.Unmarshal(raw.Data, &uev); err != nil || uev.Report == nil || uev.Report.ByRole[protocol.RoleMiner].InputTokens != 200 {
		t.Fatalf("usage report: %+v %v", uev.Report, err)
	}
	// Re-mining reuses the stored text: no new model call.
	if _, err := miner.MineSession(ctx, d, "m1"); err != nil || model.calls != 2 {
		t.Fatalf("re-mine called the model again (%d calls): %v", model.calls, err)
	}
}
