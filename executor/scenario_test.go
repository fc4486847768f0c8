package executor

import (
	"fmt"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/llm/llmtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/usage"
)

type costRow struct {
	cache, format, session string
	u                      protocol.Usage
	usd                    float64
}

// TestCostScenario measures what the committed scenario costs per session against the
// cache-computing Anthropic fake, for prompt caching off and on and for TOON and JSON tool
// results. Each combination gets a fresh fake (a cold provider cache) and runs two sessions
// of the same agent: the first pays to write the cache, the second (a new task) finds the
// stable prefix there. With -v it prints the table recorded in docs/benchmarks.md.
func TestCostScenario(t *testing.T) {
	sc := loadScenario(t)
	m := startMesh(t, sc.dir, sc.cfg.Tools.Enabled...)
	model := sc.cfg.LLM.Model
	ttl := sc.cfg.LLM.CacheTTL
	tasks := []string{sc.task, strings.Replace(sc.task, "Denmark", "Sweden", 1)}

	var rows []costRow
	for _, cache := range []string{"off", "auto"} {
		for _, format := range []string{"json", "toon", "auto"} {
			fake := llmtest.NewAnthropic(t, sc.script())
			cfg := sc.anthropic(t, fake)
			cfg.LLM.Cache = cache
			cfg.Tools.ResultFormat = format
			// This table is about caching and result formats: every result goes in whole.
			cfg.Tools.MaxResultTokens = 0
			x := m.executor(t, cfg, nil)
			var total protocol.Usage
			for i, task := range tasks {
				st := step(t, cfg, task)
				st.SessionID = fmt.Sprintf("cost-%s-%s-%d", cache, format, i+1)
				res, _ := m.runStep(t, x, st)
				if res.Outcome != protocol.OutcomeSuccess || res.Turns != len(sc.turns) {
					t.Fatalf("%s: outcome %s after %d turns (%s)", st.SessionID, res.Outcome, res.Turns, res.Reason)
				}
				usd, known := usage.Cost(model, res.Usage, ttl)
				if !known {
					t.Fatalf("no price for %s", model)
				}
				name := "1 (cold cache)"
				if i == 1 {
					name = "2 (new task)"
				}
				rows = append(rows, costRow{cache, format, name, res.Usage, usd})
				total = total.Add(res.Usage)
			}
			// What the executor accounted is what the provider billed.
			if got := fake.Totals(); got != total {
				t.Errorf("cache %s, %s: executor counted %+v, provider billed %+v", cache, format, total, got)
			}
		}
	}

	find := func(cache, format, session string) costRow {
		for _, r := range rows {
			if r.cache == cache && r.format == format && strings.HasPrefix(r.session, session) {
				return r
			}
		}
		t.Fatalf("no row %s/%s/%s", cache, format, session)
		return costRow{}
	}
	for _, format := range []string{"json", "toon"} {
		for _, s := range []string{"1", "2"} {
			off, on := find("off", format, s), find("auto", format, s)
			if on.usd >= off.usd || on.u.CacheReadInputTokens == 0 || off.u.CacheReadInputTokens != 0 {
				t.Errorf("%s session %s: caching on %+v ($%.4f) is not cheaper than off %+v ($%.4f)", format, s, on.u, on.usd, off.u, off.usd)
			}
		}
	}
	for _, cache := range []string{"off", "auto"} {
		j, tn, a := find(cache, "json", "1"), find(cache, "toon", "1"), find(cache, "auto", "1")
		if tn.usd >= j.usd {
			t.Errorf("cache %s: TOON results ($%.4f) are not cheaper than JSON ($%.4f) on this scenario", cache, tn.usd, j.usd)
		}
		// auto sends each result in its cheaper form, so it never costs more than all-TOON.
		if a.usd > tn.usd {
			t.Errorf("cache %s: auto results ($%.4f) cost more than TOON ($%.4f)", cache, a.usd, tn.usd)
		}
	}

	if testing.Verbose() {
		fmt.Println(costTable(model, rows))
	}
}

func costTable(model string, rows []costRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nmodel %s (pkg/usage prices), %d rows\n\n", model, len(rows))
	b.WriteString("| caching | results | session | input (full price) | cache writes | cache reads | output | all input | cost (USD) |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		all := r.u.InputTokens + r.u.CacheCreationInputTokens + r.u.CacheReadInputTokens
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %d | %.4f |\n", r.cache, strings.ToUpper(r.format), r.session,
			r.u.InputTokens, r.u.CacheCreationInputTokens, r.u.CacheReadInputTokens, r.u.OutputTokens, all, r.usd)
	}
	return b.String()
}
