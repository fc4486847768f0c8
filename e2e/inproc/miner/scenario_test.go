package miner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/miner"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/memory/gate/gatetest"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tools"
)

// scenario runs memoryd and the miner on a real NATS server with the scripted model as the
// miner's model: it compresses, judges relations and plays the lesson gate's judge.
type scenario struct {
	*env
	deps miner.Deps
}

type scriptRule struct {
	When  map[string]string `yaml:"when,omitempty"`
	Reply map[string]string `yaml:"reply"`
}

// scriptedMiner is the default config with the scripted model, playing rules, as the miner's
// model (memoryd's judges use it too).
func scriptedMiner(t *testing.T, rules []scriptRule) *config.Config {
	t.Helper()
	data, err := yaml.Marshal(map[string]any{"rules": rules})
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Miner.LLM = &config.LLM{Provider: "scripted", Model: "scripted", Script: script}
	return cfg
}

// startMemoryd runs memoryd with d on m until the test ends and returns a client of it that
// gives each try perTry.
func startMemoryd(t *testing.T, m *bustest.Mesh, d memoryd.Deps, perTry time.Duration) memoryd.Client {
	t.Helper()
	roles := bustest.RunRoles(t, m)
	ready := make(chan struct{})
	d.Conn, d.Names, d.Ready = roles.Connect("memoryd"), m.Names, ready
	roles.GoReady("memoryd", ready, func(ctx context.Context) error { return memoryd.Run(ctx, d) })
	return memoryd.Client{NC: m.Conn.NC, Names: m.Names, PerTry: perTry}
}

// mine has the miner mine session id, once evs are written to its trace as the mesh would.
func mine(t *testing.T, deps miner.Deps, id string, evs ...protocol.Event) *miner.Result {
	t.Helper()
	sessiontest.Publish(t, deps.Conn, deps.Names, id, evs...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := miner.MineSession(ctx, deps, id)
	if err != nil {
		t.Fatalf("%s: mine: %v", id, err)
	}
	return res
}

func startScenario(t *testing.T, rules []scriptRule, emb embed.Embedder, edit func(*config.Config)) *scenario {
	t.Helper()
	m := bustest.Start(t)
	cfg := scriptedMiner(t, rules)
	if edit != nil {
		edit(cfg)
	}
	e := &env{m: m, cfg: cfg, mem: startMemoryd(t, m, memoryd.Deps{Config: cfg, Embedder: emb}, 10*time.Second)}
	return &scenario{env: e, deps: miner.Deps{Conn: m.Conn, Names: m.Names, Config: cfg}}
}

type call struct {
	tool, args string
	ok         bool
	err        string
}

// session retrieves for the task as an executor would, writes the session's trace (its tools,
// what it retrieved, its calls, its outcome) and has the miner mine it; it returns what was
// retrieved and what the miner did.
func (s *scenario) session(t *testing.T, id, agent, task string, offered []string, outcome protocol.Outcome, calls ...call) ([]protocol.Guideline, *miner.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gs, err := s.mem.Retrieve(ctx, protocol.RetrieveRequest{Agent: agent, Task: task, Tools: offered, SessionID: id})
	if err != nil {
		t.Fatalf("%s: retrieve: %v", id, err)
	}
	evs := []protocol.Event{
		{Type: protocol.EvSessionStarted, Agent: agent, Task: task},
		{Type: protocol.EvTools, Tools: offered, Attrs: map[string]string{"phase": "offered"}},
		{Type: protocol.EvRetrieval, Guidelines: gs},
	}
	for _, c := range calls {
		r := protocol.ToolResult{OK: c.ok, Result: json.RawMessage(`{"ok":true}`)}
		if !c.ok {
			r = protocol.ToolResult{OK: false, Kind: protocol.ToolErrToolError, Error: c.err}
		}
		evs = append(evs, protocol.Event{Type: protocol.EvToolCall, Tool: c.tool, Args: json.RawMessage(c.args), Result: &r})
	}
	evs = append(evs, protocol.Event{Type: protocol.EvFinal, Outcome: outcome}, protocol.Event{Type: protocol.EvUsage, Report: &protocol.UsageReport{}})
	return gs, mine(t, s.deps, id, evs...)
}

func (s *scenario) entry(t *testing.T, id string) memory.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := s.mem.Get(ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return *e
}

func eventsOf(e memory.Entry) []string {
	var out []string
	for _, c := range e.History {
		out = append(out, c.Event)
	}
	return out
}

// The scenario end to end: "Always ... ISO dates" is promoted at 4 sessions; report_tool
// then wants DD/MM/YYYY, and the contrary lesson mined from its failures loses first (4 sessions
// against the rule's 6), keeps counting while superseded, and once its evidence overtakes the
// rule's the judge is asked again and it replaces the rule. Both are kept and linked; the
// prompt's standing rule is the new one.
func TestStaleRuleIsOverturnedEndToEnd(t *testing.T) {
	const (
		always = `Always pass dates to report_tool as ISO dates like "2024-05-01".`
		never  = `Never pass ISO dates like "2024-05-01" to report_tool; it wants DD/MM/YYYY.`
		judged = "report_tool changed the date format it accepts"
	)
	s := startScenario(t, []scriptRule{
		{When: map[string]string{"system": "^skein-miner", "last": "date must be DD/MM/YYYY"}, Reply: map[string]string{"text": never}},
		{When: map[string]string{"system": "^skein-miner", "last": "2024-05-01"}, Reply: map[string]string{"text": always}},
		{When: map[string]string{"system": "^skein-miner"}, Reply: map[string]string{"text": "Call report_tool once per month of the report."}},
		{When: map[string]string{"system": "^skein-memoryd: guideline relation judge", "last": "(?s)ISO.*ISO"},
			Reply: map[string]string{"text": `{"relation": "contradiction", "reconciled": "", "reason": "` + judged + `"}`}},
		{When: map[string]string{"system": "^skein-memoryd: guideline relation judge"}, Reply: map[string]string{"text": `{"relation": "independent", "reason": "different advice"}`}},
		{When: map[string]string{"system": "^skein-memoryd: lesson gate"}, Reply: map[string]string{"text": `{"verdict": "accept", "reason": "advice about a tool"}`}},
	}, embedtest.Hash{}, func(c *config.Config) { c.Memory.PromotionSessions = 4 })
	const task = "Make the monthly sales report with report_tool"
	tools := []string{"report_tool"}
	alwaysID := memory.EntryID("demo", protocol.PolarityPattern, always)
	neverID := memory.EntryID("demo", protocol.PolarityAvoid, never)

	// Phase A: report_tool takes ISO dates. Sessions after the first retrieve the lesson and
	// follow it to success: helpful marks, so at its fourth session it is promoted.
	for i := 1; i <= 6; i++ {
		s.session(t, fmt.Sprintf("a%d", i), "demo", task, tools, protocol.OutcomeSuccess, call{"report_tool", `{"date":"2024-05-01"}`, true, ""})
		if i == 4 {
			if a := s.entry(t, alwaysID); a.Tier != protocol.TierStrategic || a.DistinctSessions() != 4 {
				t.Fatalf("after 4 sessions the ISO rule is %s with %d sessions", a.Tier, a.DistinctSessions())
			}
		}
	}
	// Phase B: report_tool now wants DD/MM/YYYY. Each session's ISO call fails, the retry with
	// DD/MM/YYYY succeeds; the miner learns the contrary lesson from the failure.
	var lostAt, overturnedAt int
	for i := 1; i <= 14 && overturnedAt == 0; i++ {
		id := fmt.Sprintf("b%d", i)
		s.session(t, id, "demo", task, tools, protocol.OutcomeSuccessWithRecovery,
			call{"report_tool", `{"date":"2024-06-01"}`, false, "date must be DD/MM/YYYY"},
			call{"report_tool", `{"date":"01/06/2024"}`, true, ""})
		n := s.entry(t, neverID)
		switch {
		case lostAt == 0 && n.Status == memory.StatusSuperseded:
			lostAt = n.DistinctSessions()
		case n.Status == memory.StatusActive && n.Tier == protocol.TierStrategic:
			overturnedAt = n.DistinctSessions()
		}
	}
	a, n := s.entry(t, alwaysID), s.entry(t, neverID)
	if lostAt != 4 || overturnedAt <= lostAt || overturnedAt <= a.DistinctSessions() {
		t.Fatalf("the contrary lesson lost at %d sessions and took over at %d (the ISO rule has %d); want a loss at 4, then more sessions than the rule\nnever: %+v\nalways: %+v",
			lostAt, overturnedAt, a.DistinctSessions(), n, a)
	}
	if a.Status != memory.StatusSuperseded || a.SupersededBy != neverID || !slices.Contains(n.Supersedes, alwaysID) || !slices.Contains(a.Supersedes, neverID) {
		t.Fatalf("both rules must be kept and linked:\nnever: %+v\nalways: %+v", n, a)
	}
	t.Logf("the contrary lesson lost at %d sessions, took over at %d (evidence %d vs %d); the ISO rule has %d sessions, utility %+.2f",
		lostAt, overturnedAt, n.DistinctSessions()+n.Helpful-n.Harmful, a.DistinctSessions()+a.Helpful-a.Harmful, a.DistinctSessions(), a.Utility)
	// Its history says it lost, was judged again, and replaced the rule, with the judge's reason.
	if got := eventsOf(n); !slices.Equal(got, []string{protocol.ChangeSuperseded, protocol.ChangeReinstated, protocol.ChangeSupersedes, protocol.ChangePromoted}) {
		t.Fatalf("the new rule's history: %v", got)
	}
	took := n.History[2]
	if took.Other != alwaysID || !strings.Contains(took.Reason, judged) || took.At.IsZero() {
		t.Fatalf("the overturn's record: %+v", took)
	}
	// The next session's prompt stands on the new rule; the old one is in no prompt.
	gs, _ := s.session(t, "c1", "demo", task, tools, protocol.OutcomeSuccess, call{"report_tool", `{"date":"01/07/2024"}`, true, ""})
	strategic, tactical := retrieve.Render(gs)
	if !strings.Contains(strategic, "Never pass ISO dates") || strings.Contains(strategic+tactical, "Always pass dates") {
		t.Fatalf("prompt after the overturn:\n%s\n%s", strategic, tactical)
	}
}

// The corpus end to end: each injection reaches memory as a tool's error in three sessions (the
// same text, or the pieces and spellings of a split one), the miner's model paraphrases it into
// the lesson, every session that used what memory gave it succeeds, and the lesson gate (the
// normalised rules, and the scripted model as its judge) stands between. None reaches the
// prompt, neither as a standing rule nor as a hint; each ordinary lesson, offered the same way,
// becomes a standing rule.
func TestInjectionCorpusEndToEnd(t *testing.T) {
	c, err := gatetest.LoadCorpus()
	if err != nil {
		t.Fatal(err)
	}
	type item struct {
		agent, tool string
		texts       []string
		seen        []string
		injection   bool
		name        string
	}
	var items []item
	for i, inj := range c.Injections {
		texts := inj.Sessions
		for len(texts) < 3 {
			texts = append(texts, texts[0])
		}
		items = append(items, item{agent: fmt.Sprintf("inj%02d", i), tool: inj.Tools[0], texts: texts, seen: inj.Seen, injection: true, name: inj.Name})
	}
	for i, o := range c.Ordinary {
		items = append(items, item{agent: fmt.Sprintf("ord%02d", i), tool: o.Tools[0], texts: []string{o.Text, o.Text, o.Text}, seen: o.Seen, name: o.Text})
	}
	rules := []scriptRule{
		// The judge catches what the rules let through (the corpus's judge_only entries).
		{When: map[string]string{"system": "^skein-memoryd: lesson gate", "last": "(?i)operator"},
			Reply: map[string]string{"text": `{"verdict": "reject", "reason": "gives tool output the operator's authority"}`}},
		{When: map[string]string{"system": "^skein-memoryd: lesson gate"}, Reply: map[string]string{"text": `{"verdict": "accept", "reason": "advice about a tool"}`}},
		{When: map[string]string{"system": "^skein-memoryd: guideline relation judge"}, Reply: map[string]string{"text": `{"relation": "independent", "reason": "unrelated"}`}},
		// A success is compressed by the template (a "-" answer is empty once cleaned).
		{When: map[string]string{"system": "^skein-miner", "last": "The run succeeded"}, Reply: map[string]string{"text": "-"}},
	}
	for _, it := range items {
		for j, text := range it.texts {
			rules = append(rules, scriptRule{When: map[string]string{"system": "^skein-miner", "last": fmt.Sprintf("case %s-%d:", it.agent, j)}, Reply: map[string]string{"text": text}})
		}
	}
	// Real sentence embeddings, so what a task retrieves is what a user's would.
	emb, err := minilm.Open(minilm.Options{})
	if err != nil {
		devtest.Missing(t, fmt.Sprintf("all-MiniLM-L6-v2 (%v)", err))
	}
	t.Cleanup(func() { emb.Close() })
	s := startScenario(t, rules, emb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var specs []protocol.ToolSpec
	for _, k := range c.Known {
		specs = append(specs, protocol.ToolSpec{Name: k, Description: "corpus tool", InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	if err := tools.Publish(ctx, s.m.Conn.JS, s.m.Names, specs); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		task := "Do the task with " + it.tool
		args := `{}`
		if len(it.seen) > 0 {
			args = fmt.Sprintf(`{"url":"http://%s/v1"}`, it.seen[0])
		}
		for j, text := range it.texts {
			// The tool's error carries the raw text; the miner's model paraphrases it.
			s.session(t, fmt.Sprintf("%s-s%d", it.agent, j), it.agent, task, []string{it.tool}, protocol.OutcomeSuccessWithRecovery,
				call{it.tool, args, false, fmt.Sprintf("case %s-%d: %s", it.agent, j, text)},
				call{it.tool, `{}`, true, ""})
		}
		gs, _ := s.session(t, it.agent+"-after", it.agent, task, []string{it.tool}, protocol.OutcomeSuccess, call{it.tool, `{}`, true, ""})
		strategic, tactical := retrieve.Render(gs)
		// Each request has its own deadline: the whole corpus takes minutes on a loaded machine.
		lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
		es, err := s.mem.ListAll(lctx, protocol.MemoryListRequest{Agent: it.agent, Status: memory.StatusAny})
		lcancel()
		if err != nil {
			t.Fatal(err)
		}
		if it.injection {
			for _, text := range it.texts {
				norm := gate.Normalize(text)
				if strings.Contains(strategic+tactical, norm) || strings.Contains(retrieve.Sanitize(strategic+tactical), retrieve.Sanitize(norm)) {
					t.Errorf("%s: %q reached the prompt:\n%s\n%s", it.name, text, strategic, tactical)
				}
			}
			for _, e := range es {
				if e.Polarity == protocol.PolarityAvoid && e.Status != memory.StatusQuarantined {
					t.Errorf("%s: stored as %s %s: %q", it.name, e.Status, e.Tier, e.Text)
				}
			}
			continue
		}
		var lesson *memory.Entry
		for i := range es {
			if es[i].Polarity == protocol.PolarityAvoid {
				lesson = &es[i]
			}
		}
		if lesson == nil || lesson.Tier != protocol.TierStrategic || lesson.Status != memory.StatusActive || !strings.Contains(strategic, retrieve.Sanitize(lesson.Text)) {
			t.Errorf("ordinary lesson %q did not become a standing rule: %+v\n%s", it.name, lesson, strategic)
		}
	}
}
