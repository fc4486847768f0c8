package executor

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

const (
	podsTask  = "The checkout pods in production keep crashing. Find which ones are restarting and show me the logs of the crashed instance."
	slackTask = "Post a short summary of today's billing deploy to the #releases channel on Slack."
	// cancelTask is the benchmark's task whose first set misses a needed tool (lookup_customer).
	cancelTask = "Cancel the subscription of customer acme-gmbh at the end of their billing period."
)

// catalogMesh serves the 74-tool catalogue through a real toolhost; with embed, memoryd's embed
// endpoint answers with the real MiniLM model.
func catalogMesh(t *testing.T, embed bool) (*mesh, toolCatalog) {
	t.Helper()
	c := loadCatalog(t)
	var m *mesh
	if embed {
		emb := realEmbedder(t)
		m = startMeshDirs(t, c.dirs)
		serveEmbed(t, m, emb)
	} else {
		m = startMeshDirs(t, c.dirs)
	}
	return m, c
}

func retrievalConfig(c toolCatalog) *config.Config {
	cfg := testConfig(c.dirs[0])
	cfg.Tools.ManifestDirs = c.dirs
	cfg.Tools.Retrieval.Enabled = true
	return cfg
}

func toolNamesOf(req llm.Request) []string {
	var out []string
	for _, d := range req.Tools {
		out = append(out, d.Name)
	}
	return out
}

func toolsEvents(evs []protocol.Event, phase string) []protocol.Event {
	var out []protocol.Event
	for _, e := range sessiontest.Of(evs, protocol.EvTools, "") {
		if e.Attrs["phase"] == phase {
			out = append(out, e)
		}
	}
	return out
}

// A step is offered the top_k tools that fit its task plus find_tools, the same set for the
// same task, and the trace says which and how they were ranked.
func TestRetrievalOffersTopKTools(t *testing.T) {
	m, c := catalogMesh(t, true)
	cfg := retrievalConfig(c)
	rec := &recorder{Backend: scriptBackend(t, "rules:\n  - reply: {text: Looked.}\n")}
	x := m.executor(t, cfg, rec)
	var sets [][]string
	for i := range 2 {
		st := step(t, cfg, podsTask)
		st.SessionID += string(rune('a' + i))
		res, evs := m.runStep(t, x, st)
		if res.Outcome != protocol.OutcomeSuccess {
			t.Fatalf("outcome %s (%s)", res.Outcome, res.Reason)
		}
		req := rec.requests()[i]
		names := toolNamesOf(req)
		sets = append(sets, names)
		// The top_k tools, then the built-ins finish and find_tools.
		if len(names) != cfg.Tools.Retrieval.TopK+2 || names[len(names)-1] != protocol.ToolFindTools {
			t.Fatalf("offered %v, want %d tools and find_tools last", names, cfg.Tools.Retrieval.TopK)
		}
		for _, need := range []string{"list_pods", "get_pod_logs"} {
			if !slices.Contains(names, need) {
				t.Errorf("offered %v lacks %s", names, need)
			}
		}
		off := toolsEvents(evs, "offered")
		if len(off) != 1 || off[0].Attrs["ranker"] != "hybrid" || off[0].Attrs["catalog"] != "74" || len(off[0].Tools) != cfg.Tools.Retrieval.TopK {
			t.Fatalf("offered events %+v, want one hybrid ranking of the 74-tool catalogue", off)
		}
		if used := toolsEvents(evs, "used"); len(used) != 1 || len(used[0].Tools) != 0 {
			t.Fatalf("used events %+v, want one with no tool", used)
		}
	}
	if !slices.Equal(sets[0], sets[1]) {
		t.Fatalf("the same task was offered %v, then %v", sets[0], sets[1])
	}
	if n := x.retrieval().ranker.Cached(); n != len(c.specs) {
		t.Fatalf("%d tool vectors cached, want the %d of the catalogue", n, len(c.specs))
	}
}

// The needed tool is not in the first set; the model asks find_tools, the set widens once, the
// model is told what was added, and the step succeeds with the found tool.
func TestFindToolsWidensTheSet(t *testing.T) {
	m, c := catalogMesh(t, true)
	cfg := retrievalConfig(c)
	rec := &recorder{Backend: scriptBackend(t, `rules:
  - when: {last: "status: done"}
    reply: {text: "Cancelled at the end of the period."}
  - when: {last: "Tools added"}
    reply:
      tool_calls:
        - {name: lookup_customer, args: {query: acme-gmbh}}
  - reply:
      text: I need to find the customer first; none of my tools looks customers up.
      tool_calls:
        - {name: find_tools, args: {query: find a customer account}}
`)}
	x := m.executor(t, cfg, rec)
	res, evs := m.runStep(t, x, step(t, cfg, cancelTask))
	if res.Outcome != protocol.OutcomeSuccess || res.Turns != 3 {
		t.Fatalf("outcome %s after %d turns (%s), want success after 3", res.Outcome, res.Turns, res.Reason)
	}
	reqs := rec.requests()
	if first := toolNamesOf(reqs[0]); slices.Contains(first, "lookup_customer") {
		t.Fatalf("first set %v already holds lookup_customer; the test needs a task where it does not", first)
	}
	second := toolNamesOf(reqs[1])
	if !slices.Contains(second, "lookup_customer") || len(second) > cfg.Tools.Retrieval.TopK+2+findToolsLimit {
		t.Fatalf("second set %v: want lookup_customer added, at most %d more tools", second, findToolsLimit)
	}
	if !slices.Equal(toolNamesOf(reqs[1]), toolNamesOf(reqs[2])) {
		t.Fatalf("the set changed again without a request: %v then %v", toolNamesOf(reqs[1]), toolNamesOf(reqs[2]))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	note := last.Content[len(last.Content)-1]
	if note.Type != llm.BlockText || !strings.Contains(note.Text, "lookup_customer (Find a customer account in the CRM") {
		t.Fatalf("the model was not told what was added: %+v", note)
	}
	widened := toolsEvents(evs, "widened")
	if len(widened) != 1 || widened[0].Attrs["by"] != protocol.ToolFindTools || !slices.Contains(widened[0].Tools, "lookup_customer") {
		t.Fatalf("widened events %+v", widened)
	}
	used := toolsEvents(evs, "used")
	if len(used) != 1 || !slices.Equal(used[0].Tools, []string{"find_tools", "lookup_customer"}) || used[0].Attrs["widenings"] != "1" {
		t.Fatalf("used events %+v", used)
	}
	calls := sessiontest.Of(evs, protocol.EvToolCall, "")
	if len(calls) != 2 || calls[1].Tool != "lookup_customer" || !calls[1].Result.OK {
		t.Fatalf("tool calls %+v", calls)
	}
}

// A call to a known tool that was not offered runs, and the tool joins the set.
func TestCallToToolNotOfferedRunsAndWidens(t *testing.T) {
	m, c := catalogMesh(t, true)
	cfg := retrievalConfig(c)
	rec := &recorder{Backend: scriptBackend(t, `rules:
  - when: {last: "status: done"}
    reply: {text: Sent.}
  - reply:
      tool_calls:
        - {name: get_weather, args: {location: Aarhus}}
`)}
	x := m.executor(t, cfg, rec)
	res, evs := m.runStep(t, x, step(t, cfg, podsTask))
	if res.Outcome != protocol.OutcomeSuccess {
		t.Fatalf("outcome %s (%s)", res.Outcome, res.Reason)
	}
	reqs := rec.requests()
	if slices.Contains(toolNamesOf(reqs[0]), "get_weather") || !slices.Contains(toolNamesOf(reqs[1]), "get_weather") {
		t.Fatalf("sets %v then %v: want get_weather added after the call", toolNamesOf(reqs[0]), toolNamesOf(reqs[1]))
	}
	w := toolsEvents(evs, "widened")
	if len(w) != 1 || w[0].Attrs["by"] != "call" {
		t.Fatalf("widened %+v", w)
	}
	if calls := sessiontest.Of(evs, protocol.EvToolCall, ""); len(calls) != 1 || !calls[0].Result.OK {
		t.Fatalf("calls %+v", calls)
	}
}

// A tool nobody serves is refused with the offered tools and a pointer to find_tools; the
// set grows at most max_widen times.
func TestUnknownToolAndWideningLimit(t *testing.T) {
	m, c := catalogMesh(t, true)
	cfg := retrievalConfig(c)
	cfg.Tools.Retrieval.MaxWiden = 1
	rec := &recorder{Backend: scriptBackend(t, `rules:
  - when: {last: "not added"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: Done.}}]}
  - when: {last: "Tools added"}
    reply:
      tool_calls:
        - {name: launch_rocket, args: {}}
        - {name: find_tools, args: {query: weather forecast}}
  - reply:
      tool_calls:
        - {name: find_tools, args: {query: send an email}}
`)}
	x := m.executor(t, cfg, rec)
	res, evs := m.runStep(t, x, step(t, cfg, podsTask))
	if res.Outcome != protocol.OutcomeSuccessWithRecovery {
		t.Fatalf("outcome %s (%s), want success_with_recovery (one call failed)", res.Outcome, res.Reason)
	}
	calls := sessiontest.Of(evs, protocol.EvToolCall, "")
	if len(calls) != 3 || calls[1].Result.Kind != protocol.ToolErrUnknown || !strings.Contains(calls[1].Result.Error, "find_tools") {
		t.Fatalf("calls %+v: want launch_rocket refused with a pointer to find_tools", calls)
	}
	if r := toolsEvents(evs, "refused"); len(r) != 1 || !slices.Contains(r[0].Tools, "get_weather") {
		t.Fatalf("refused events %+v, want the second widening refused", r)
	}
	reqs := rec.requests()
	if slices.Contains(toolNamesOf(reqs[2]), "get_weather") {
		t.Fatal("get_weather was added past max_widen")
	}
}

// A learned success pattern ("for tasks like X, use Y") puts its tools in the set.
func TestPatternGuidelineBoostsItsTools(t *testing.T) {
	m, c := catalogMesh(t, true)
	sub, err := m.Conn.NC.Subscribe(m.Names.Memory(protocol.MemRetrieve), func(msg *nats.Msg) {
		rep := protocol.RetrieveReply{Guidelines: []protocol.Guideline{{ID: "p1", Polarity: protocol.PolarityPattern,
			Tier: protocol.TierTactical, Tools: []string{"get_weather"}, Text: `For tasks like "checkout pods crashing", use get_weather.`}}}
		data, _ := protocol.Marshal(&rep)
		_ = msg.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	cfg := retrievalConfig(c)
	cfg.Memory.Enabled = true
	rec := &recorder{Backend: scriptBackend(t, "rules:\n  - reply: {text: ok}\n")}
	x := m.executor(t, cfg, rec)
	_, evs := m.runStep(t, x, step(t, cfg, podsTask))
	off := toolsEvents(evs, "offered")
	if len(off) != 1 || !slices.Contains(off[0].Tools, "get_weather") || off[0].Attrs["boosted"] != "get_weather" {
		t.Fatalf("offered %+v, want get_weather boosted into the set", off)
	}
}

// Without memoryd the tools are ranked by BM25 alone: one log line says so, the trace too, and
// the step does not wait for the embedder again.
func TestRetrievalWithoutEmbedderUsesBM25(t *testing.T) {
	m, c := catalogMesh(t, false)
	cfg := retrievalConfig(c)
	var logs devtest.LogBuffer
	x := newExecutor(t, m.Mesh, cfg, scriptBackend(t, "rules:\n  - reply: {text: ok}\n"), slog.New(slog.NewTextHandler(&logs, nil)))
	for i := range 2 {
		st := step(t, cfg, slackTask)
		st.SessionID += string(rune('a' + i))
		_, evs := m.runStep(t, x, st)
		off := toolsEvents(evs, "offered")
		if len(off) != 1 || off[0].Attrs["ranker"] != "lexical" || !strings.Contains(off[0].Reason, "BM25 alone") {
			t.Fatalf("offered %+v, want a lexical ranking with the reason", off)
		}
		if !slices.Contains(off[0].Tools, "send_slack_message") {
			t.Fatalf("BM25 offered %v without send_slack_message", off[0].Tools)
		}
	}
	if n := strings.Count(logs.String(), "ranking tools by BM25 alone"); n != 1 {
		t.Fatalf("%d log lines about BM25 ranking, want exactly one:\n%s", n, logs.String())
	}
}

// serveAgents starts a second real toolhost that offers agents as tools (tools.agents), as the
// toolhost of an agent listing them does.
func serveAgents(t *testing.T, m *mesh, agents ...string) {
	t.Helper()
	startToolhost(t, m.Mesh, "agent-host", map[string]any{"agents": agents})
}

// An agent offered as a tool (tools.agents) is ranked with the catalogue like any tool: it is
// in the set of a step whose task fits it, and not in the set of one whose task does not.
func TestAgentOfferedAsToolIsRanked(t *testing.T) {
	m, c := catalogMesh(t, true)
	serveAgents(t, m, "tax_advisor")
	cfg := retrievalConfig(c)
	cfg.Tools.Agents = []string{"tax_advisor"}
	rec := &recorder{Backend: scriptBackend(t, "rules:\n  - reply: {text: ok}\n")}
	x := m.executor(t, cfg, rec)
	for i, tc := range []struct {
		task    string
		offered bool
	}{
		{"Ask our tax advisor whether the Danish company must charge VAT on software licences it sells to a customer in Norway.", true},
		{podsTask, false},
	} {
		st := step(t, cfg, tc.task)
		st.SessionID += fmt.Sprint(i)
		_, evs := m.runStep(t, x, st)
		off := toolsEvents(evs, "offered")
		if len(off) != 1 || off[0].Attrs["catalog"] != fmt.Sprint(len(c.specs)+1) || off[0].Attrs["ranker"] != "hybrid" {
			t.Fatalf("offered events %+v, want one hybrid ranking of the %d tools and the agent", off, len(c.specs))
		}
		sent := toolNamesOf(rec.requests()[i])
		if slices.Contains(sent, "tax_advisor") != tc.offered || slices.Contains(off[0].Tools, "tax_advisor") != tc.offered {
			t.Fatalf("%q: the model got %v (trace: %v); want the agent offered: %v", tc.task, sent, off[0].Tools, tc.offered)
		}
	}
	if n := x.retrieval().ranker.Cached(); n != len(c.specs)+1 {
		t.Fatalf("%d vectors cached, want the %d tools and the agent", n, len(c.specs)+1)
	}
}

// tools.retrieval.always_include is offered to every step besides the top_k, whatever its
// score; a name that is not in the catalogue is left out.
func TestAlwaysIncludeIsOffered(t *testing.T) {
	m, c := catalogMesh(t, true)
	cfg := retrievalConfig(c)
	cfg.Tools.Retrieval.AlwaysInclude = []string{"get_weather", "no_such_tool"}
	rec := &recorder{Backend: scriptBackend(t, "rules:\n  - reply: {text: ok}\n")}
	x := m.executor(t, cfg, rec)
	_, evs := m.runStep(t, x, step(t, cfg, podsTask))
	sent := toolNamesOf(rec.requests()[0])
	// The top_k tools and get_weather, then finish and find_tools.
	if len(sent) != cfg.Tools.Retrieval.TopK+3 || !slices.Contains(sent, "get_weather") || slices.Contains(sent, "no_such_tool") {
		t.Fatalf("the model got %v, want the %d best tools, get_weather and the built-ins", sent, cfg.Tools.Retrieval.TopK)
	}
	for _, need := range []string{"list_pods", "get_pod_logs"} {
		if !slices.Contains(sent, need) {
			t.Fatalf("always_include pushed %s out of the set %v", need, sent)
		}
	}
	if off := toolsEvents(evs, "offered"); len(off) != 1 || !slices.Contains(off[0].Tools, "get_weather") {
		t.Fatalf("offered events %+v, want get_weather in the set", off)
	}
}
