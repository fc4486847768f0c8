package miner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/miner"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/cases"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore/milvustest"
	"github.com/skein-mesh/skein/pkg/memory/skills"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// caseMesh is memoryd (on the KV store, or on Milvus when store is set) and the miner on a real
// NATS server, with the scripted model as the miner's model: it distils cases, writes skills,
// plays the lesson gate's judge. Both roles log into logs.
type caseMesh struct {
	m    *bustest.Mesh
	mem  memoryd.Client
	deps miner.Deps
	logs *devtest.LogBuffer
}

const (
	goodCase = `{"intent": "Make the monthly sales report from the month's sales CSV",
  "approach": [{"tool": "csv_read", "note": "read the month's rows"}, {"tool": "report_tool", "note": "build the report"}],
  "insight": "report_tool refuses ISO dates; pass the date as DD/MM/YYYY", "evidence": "date must be DD/MM/YYYY", "quality": 0.85}`
	goodSkill = `{"name": "monthly-sales-report", "preconditions": ["the month's sales CSV exists"],
  "steps": [{"tool": "csv_read", "text": "Read the month's sales CSV"}, {"tool": "report_tool", "text": "Build the report, the date as DD/MM/YYYY"}],
  "pitfalls": ["report_tool refuses ISO dates such as 2024-03-01"]}`
)

func startCaseMesh(t *testing.T, rules []scriptRule, emb embed.Embedder, openStore func(*bustest.Mesh) memory.Store) *caseMesh {
	t.Helper()
	rules = append(rules,
		scriptRule{When: map[string]string{"system": "^skein-memoryd: lesson gate"}, Reply: map[string]string{"text": `{"verdict": "accept", "reason": "about the task's tools"}`}},
		scriptRule{When: map[string]string{"system": "^skein-memoryd: guideline relation judge"}, Reply: map[string]string{"text": `{"relation": "independent", "reason": "different advice"}`}},
		scriptRule{When: map[string]string{"system": "^skein-miner"}, Reply: map[string]string{"text": "-"}}, // guidelines: the template
	)
	m := bustest.Start(t)
	cfg := scriptedMiner(t, rules)
	logs := &devtest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var st memory.Store
	if openStore != nil {
		st = openStore(m)
	}
	mem := startMemoryd(t, m, memoryd.Deps{Config: cfg, Embedder: emb, Store: st, Logger: log}, 20*time.Second)
	return &caseMesh{m: m, logs: logs, mem: mem, deps: miner.Deps{Conn: m.Conn, Names: m.Names, Config: cfg, Logger: log}}
}

func miniLM(t *testing.T) embed.Embedder {
	emb, err := minilm.Open(minilm.Options{})
	if err != nil {
		devtest.Missing(t, fmt.Sprintf("all-MiniLM-L6-v2 (%v)", err))
	}
	t.Cleanup(func() { emb.Close() })
	return emb
}

// report writes a report session's trace as the mesh would (the CSV read, report_tool refusing
// an ISO date and then taking DD/MM/YYYY, or refusing it and the session giving up) and mines it.
func (c *caseMesh) report(t *testing.T, id, month string, outcome protocol.Outcome) *miner.Result {
	t.Helper()
	task := fmt.Sprintf("Make the sales report for %s from data/%s.csv", month, strings.ToLower(month))
	ok := protocol.ToolResult{OK: true, Result: json.RawMessage(`{"rows": 31}`)}
	refused := protocol.ToolResult{OK: false, Kind: protocol.ToolErrToolError, Error: "date must be DD/MM/YYYY"}
	evs := []protocol.Event{
		{Type: protocol.EvSessionStarted, Agent: "demo", Task: task},
		{Type: protocol.EvTools, Tools: []string{"csv_read", "report_tool"}},
		{Type: protocol.EvToolCall, Tool: "csv_read", Args: json.RawMessage(fmt.Sprintf(`{"path":"data/%s.csv"}`, strings.ToLower(month))), Result: &ok},
	}
	switch outcome {
	case protocol.OutcomeSuccess:
		evs = append(evs, protocol.Event{Type: protocol.EvToolCall, Tool: "report_tool", Args: json.RawMessage(`{"date":"01/03/2024"}`), Result: &ok})
	case protocol.OutcomeSuccessWithRecovery:
		evs = append(evs, protocol.Event{Type: protocol.EvToolCall, Tool: "report_tool", Args: json.RawMessage(`{"date":"2024-03-01"}`), Result: &refused},
			protocol.Event{Type: protocol.EvToolCall, Tool: "report_tool", Args: json.RawMessage(`{"date":"01/03/2024"}`), Result: &ok})
	default:
		evs = append(evs, protocol.Event{Type: protocol.EvToolCall, Tool: "report_tool", Args: json.RawMessage(`{"date":"01/03/2024"}`), Result: &refused})
	}
	cost := 0.0021
	evs = append(evs, protocol.Event{Type: protocol.EvFinal, Outcome: outcome},
		protocol.Event{Type: protocol.EvUsage, Report: &protocol.UsageReport{Usage: protocol.Usage{InputTokens: 1500, OutputTokens: 90}, Steps: 3, WallTimeS: 4.2, CostUSD: &cost}})
	return mine(t, c.deps, id, evs...)
}

func (c *caseMesh) list(t *testing.T, kind string) []memory.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	es, err := c.mem.ListAll(ctx, protocol.MemoryListRequest{Agent: "demo", Kind: kind, Status: memory.StatusAny})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func actionsOf(res *miner.Result, prefix string) []string {
	var out []string
	for _, a := range res.Actions {
		if strings.HasPrefix(a.Key, prefix) {
			out = append(out, a.Action)
		}
	}
	return out
}

// TestSessionsBecomeCasesAndSkills is the scenario on the KV store: a session becomes a
// case, three similar cases become a skill, a fourth makes it mature (a later task is shown it
// as a procedure, with a worked example), and a case that follows it and fails weakens it.
func TestSessionsBecomeCasesAndSkills(t *testing.T) {
	casesAndSkills(t, nil)
}

// TestSessionsBecomeCasesAndSkillsOnMilvus is the same on the real Milvus server.
func TestSessionsBecomeCasesAndSkillsOnMilvus(t *testing.T) {
	srv := milvustest.ServerFor(t)
	casesAndSkills(t, func(m *bustest.Mesh) memory.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		kv, err := bus.KV(ctx, m.Connect(t, "milvus").JS, m.Names, protocol.BucketMemory)
		if err != nil {
			t.Fatal(err)
		}
		emb := miniLM(t)
		st, err := milvusstore.Open(ctx, milvusstore.Options{Addr: srv.Addr, KV: kv, Prefix: fmt.Sprintf("cases_%d", time.Now().UnixNano()%1e9),
			Model: emb.Model(), Dim: emb.Dim(), Partitions: 2, Consistency: milvusstore.ConsistencyStrong})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}

func casesAndSkills(t *testing.T, store func(*bustest.Mesh) memory.Store) {
	if testing.Short() {
		t.Skip("embeds with MiniLM")
	}
	c := startCaseMesh(t, []scriptRule{
		{When: map[string]string{"system": "^" + cases.SystemMarker}, Reply: map[string]string{"text": goodCase}},
		{When: map[string]string{"system": "^" + skills.WriterMarker}, Reply: map[string]string{"text": goodSkill}},
	}, miniLM(t), store)

	res := c.report(t, "r1", "January", protocol.OutcomeSuccessWithRecovery)
	if got := actionsOf(res, "case:"); len(got) != 1 || got[0] != "added" {
		t.Fatalf("first session's case: %v (%+v)", got, res.Actions)
	}
	cs := c.list(t, memory.KindCase)
	if len(cs) != 1 {
		t.Fatalf("%d cases after one session", len(cs))
	}
	k := cs[0].Case
	if k.Intent != "Make the monthly sales report from the month's sales CSV" || k.Extractor != "model" || k.Quality != 0.85 ||
		len(k.Approach) != 3 || k.Approach[1].Error != "date must be DD/MM/YYYY" || k.Approach[0].Note != "read the month's rows" ||
		k.Insight == "" || k.Cost.InputTokens != 1500 || k.Cost.ToolFailures != 1 || k.Cost.USD != 0.0021 || cs[0].Kind != memory.KindCase {
		t.Fatalf("case %+v", k)
	}
	// Mined again: nothing counted twice, no tokens spent (the case is cached).
	again := c.report(t, "r1", "January", protocol.OutcomeSuccessWithRecovery)
	if got := actionsOf(again, "case:"); len(got) != 1 || got[0] != "skipped" || again.Usage.InputTokens != 0 {
		t.Fatalf("re-mined session: %v, %d input tokens", got, again.Usage.InputTokens)
	}

	c.report(t, "r2", "February", protocol.OutcomeSuccessWithRecovery)
	res = c.report(t, "r3", "March", protocol.OutcomeSuccess)
	if got := actionsOf(res, "skill:"); len(got) != 1 || got[0] != "formed" {
		t.Fatalf("third similar session: skill actions %v (%+v)", got, res.Actions)
	}
	ks := c.list(t, memory.KindSkill)
	if len(ks) != 1 || ks[0].Skill.Name != "monthly-sales-report" || ks[0].Skill.Writer != "model" || ks[0].Skill.Maturity != protocol.SkillCandidate ||
		len(ks[0].Skill.Cases) != 3 {
		t.Fatalf("skill %+v", ks)
	}
	c.report(t, "r4", "April", protocol.OutcomeSuccess)
	skill := c.list(t, memory.KindSkill)[0]
	if skill.Skill.Maturity != protocol.SkillMature || skill.Skill.Confirmed != 4 {
		t.Fatalf("after a fourth similar success: %+v", skill.Skill)
	}
	// The next similar task is shown the mature skill as a procedure and a worked example.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := c.mem.RetrieveReply(ctx, protocol.RetrieveRequest{Agent: "demo", Task: "Make the sales report for May from data/may.csv", Cases: 1, Skills: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skills) != 1 || rep.Skills[0].ID != skill.ID || len(rep.Cases) != 1 || rep.Cases[0].Case.Insight == "" {
		t.Fatalf("retrieval for a similar task: skills %+v cases %+v", rep.Skills, rep.Cases)
	}
	res = c.report(t, "r5", "May", protocol.OutcomeNotAccomplished)
	if got := actionsOf(res, "skill:"); len(got) != 1 || got[0] != "weakened" {
		t.Fatalf("a failing case that followed the skill: %v", got)
	}
	weak := c.list(t, memory.KindSkill)[0]
	if weak.Skill.Confidence >= skill.Skill.Confidence || weak.Skill.Weakened != 1 {
		t.Fatalf("confidence %.3f after the failure, %.3f before", weak.Skill.Confidence, skill.Skill.Confidence)
	}
	t.Logf("skill %s: confidence %.3f mature, %.3f after one failure (%s)", weak.Skill.Name, skill.Skill.Confidence, weak.Skill.Confidence, weak.Skill.Maturity)
}

// TestExtractorsRefuseBadModelOutput: for each extractor, the scripted model answers out of form
// (invalid JSON, a tool the episode never called, a quote not in the trajectory, oversized
// text). Each answer is refused with a logged reason, and nothing is lost: every session still
// becomes its case (distilled in code), and the skill still forms (written in code).
func TestExtractorsRefuseBadModelOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("embeds with MiniLM")
	}
	long := strings.Repeat("very long ", 40)
	bad := []struct{ month, caseAnswer, code string }{
		{"January", `The case: intent = monthly report`, "invalid_json"},
		{"February", `{"intent": "Make a report", "approach": [{"tool": "wipe_disk", "note": "x"}], "insight": "", "evidence": "", "quality": 0.8}`, "unknown_tool"},
		{"March", `{"intent": "Make a report", "approach": [{"tool": "report_tool", "note": ""}], "insight": "ISO works", "evidence": "ISO dates are accepted", "quality": 0.8}`, "quote_not_in_trajectory"},
		{"April", `{"intent": "` + long + `", "approach": [{"tool": "report_tool", "note": ""}], "insight": "", "evidence": "", "quality": 0.8}`, "oversized"},
	}
	var rules []scriptRule
	for _, b := range bad {
		rules = append(rules, scriptRule{When: map[string]string{"system": "^" + cases.SystemMarker, "last": "User: Make the sales report for " + b.month}, Reply: map[string]string{"text": b.caseAnswer}})
	}
	rules = append(rules, scriptRule{When: map[string]string{"system": "^" + skills.WriterMarker},
		Reply: map[string]string{"text": `{"name": "monthly-sales-report", "preconditions": [], "steps": [{"tool": "csv_read", "text": "Read"}, {"tool": "format_disk", "text": "Then this"}], "pitfalls": []}`}})
	c := startCaseMesh(t, rules, miniLM(t), nil)
	for i, b := range bad {
		c.report(t, fmt.Sprintf("b%d", i+1), b.month, protocol.OutcomeSuccessWithRecovery)
	}
	cs := c.list(t, memory.KindCase)
	if len(cs) != len(bad) {
		t.Fatalf("%d cases from %d sessions: a refused answer lost a case", len(cs), len(bad))
	}
	logs := c.logs.String()
	for _, b := range bad {
		found := false
		for _, x := range cs {
			if strings.Contains(x.Case.Refused, b.code) && x.Case.Extractor == "template" && x.Case.Insight != "" && len(x.Case.Approach) == 3 {
				found = true
			}
		}
		if !found {
			t.Errorf("no case distilled in code after a %s answer: %+v", b.code, cs)
		}
		if !strings.Contains(logs, "case extractor: the model's answer was refused") || !strings.Contains(logs, "code="+b.code) {
			t.Errorf("the %s refusal is not in the log", b.code)
		}
	}
	ks := c.list(t, memory.KindSkill)
	if len(ks) != 1 || ks[0].Skill.Writer != "template" || !strings.Contains(logs, "skill writer: the model's answer was refused") || !strings.Contains(logs, "code=unknown_tool") {
		t.Fatalf("the skill writer's bad answer: skills %+v", ks)
	}
}
