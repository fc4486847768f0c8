package executor

import (
	"fmt"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/llm/llmtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/usage"
)

// savingFloor is the recorded saving of TestCatalogCostScenario (docs/benchmarks.md): the
// billed-equivalent input tokens of the full configuration, below the naive baseline. The
// test fails when a change makes it smaller (recorded: 71.7%).
const savingFloor = 0.71

// billedEquivalent weighs input tokens as the provider bills them, in full-price input tokens:
// cache writes at 1.25x (5-minute TTL) or 2x (1 hour), cache reads at 0.1x.
func billedEquivalent(u protocol.Usage, ttl string) float64 {
	w := 1.25
	if ttl == "1h" {
		w = 2
	}
	return float64(u.InputTokens) + w*float64(u.CacheCreationInputTokens) + 0.1*float64(u.CacheReadInputTokens)
}

type catalogCostRow struct {
	name    string
	session string
	u       protocol.Usage
	billed  float64
	usd     float64
	offered string
}

// TestCatalogCostScenario is the cost scenario (testdata/scenario: a billing-support agent, four
// model turns, five tool calls with recorded results) with the agent's catalogue grown to the 74
// tools of the tool-catalogue benchmark. It compares the naive baseline (every tool in every
// call, JSON results, no prompt caching, no result cap) with each saving added in turn, up to
// retrieval (top_k 6, real MiniLM over NATS), TOON/auto results, caching and the result cap.
// Each configuration runs two sessions against a cold fake provider: the scenario's task, then
// a new task. With -v it prints the table recorded in docs/benchmarks.md.
func TestCatalogCostScenario(t *testing.T) {
	sc := loadScenario(t)
	m, c := catalogMesh(t, true)
	model, ttl := sc.cfg.LLM.Model, sc.cfg.LLM.CacheTTL
	tasks := []string{sc.task, strings.Replace(sc.task, "Denmark", "Sweden", 1)}
	type variant struct {
		name      string
		retrieval bool
		format    string
		cache     string
		capTokens int
	}
	variants := []variant{
		{"naive: all tools, JSON, no caching", false, "json", "off", 0},
		{"all tools, TOON/auto, caching", false, "auto", "auto", 0},
		{"retrieval, JSON, no caching", true, "json", "off", 0},
		{"retrieval, TOON/auto, caching, result cap", true, "auto", "auto", 4000},
	}
	var rows []catalogCostRow
	totals := map[string]float64{}
	for _, v := range variants {
		fake := llmtest.NewAnthropic(t, sc.script())
		cfg := sc.anthropic(t, fake)
		cfg.Tools.Enabled = nil // every tool of the catalogue
		cfg.Tools.ManifestDirs = c.dirs
		cfg.Tools.Retrieval.Enabled = v.retrieval
		cfg.Tools.ResultFormat = v.format
		cfg.Tools.MaxResultTokens = v.capTokens
		cfg.LLM.Cache = v.cache
		x := m.executor(t, cfg, nil)
		var all protocol.Usage
		for i, task := range tasks {
			st := step(t, cfg, task)
			st.SessionID = fmt.Sprintf("catalog-cost-%d-%d", len(rows), i+1)
			res, evs := m.runStep(t, x, st)
			if res.Outcome != protocol.OutcomeSuccess || res.Turns != len(sc.turns) {
				t.Fatalf("%s: outcome %s after %d turns (%s)", v.name, res.Outcome, res.Turns, res.Reason)
			}
			usd, _ := usage.Cost(model, res.Usage, ttl)
			offered := fmt.Sprint(len(c.specs))
			if off := toolsEvents(evs, "offered"); len(off) == 1 {
				offered = fmt.Sprint(len(off[0].Tools))
				for _, w := range toolsEvents(evs, "widened") {
					offered += fmt.Sprintf(" + %d widened (%s)", len(w.Tools), strings.Join(w.Tools, ", "))
				}
			}
			b := billedEquivalent(res.Usage, ttl)
			rows = append(rows, catalogCostRow{v.name, fmt.Sprint(i + 1), res.Usage, b, usd, offered})
			totals[v.name] += b
			all = all.Add(res.Usage)
		}
		if got := fake.Totals(); got != all {
			t.Errorf("%s: executor counted %+v, provider billed %+v", v.name, all, got)
		}
	}
	naive, best := totals[variants[0].name], totals[variants[len(variants)-1].name]
	saving := 1 - best/naive
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d tools, model %s (pkg/usage prices)\n\n", len(c.specs), model)
	b.WriteString("| configuration | session | tools offered | input (full price) | cache writes | cache reads | billed-equivalent input | vs naive | cost (USD) |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range rows {
		base := rows[i%2].billed
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %.0f | %+.1f%% | %.4f |\n", r.name, r.session, r.offered, r.u.InputTokens,
			r.u.CacheCreationInputTokens, r.u.CacheReadInputTokens, r.billed, 100*(r.billed/base-1), r.usd)
	}
	fmt.Fprintf(&b, "\nboth sessions: naive %.0f, full configuration %.0f billed-equivalent input tokens: %.1f%% less\n", naive, best, 100*saving)
	if testing.Verbose() {
		fmt.Println(b.String())
	}
	if saving < savingFloor {
		t.Errorf("saving %.3f below the recorded %.3f", saving, savingFloor)
	}
	if totals[variants[2].name] >= naive {
		t.Errorf("retrieval alone (%.0f) does not beat all tools (%.0f)", totals[variants[2].name], naive)
	}
}
