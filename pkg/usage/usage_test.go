package usage

import (
	"math"
	"sync"
	"testing"

	"github.com/skein-mesh/skein/pkg/protocol"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestEmbeddedTableParsesAndPricesRequiredModels(t *testing.T) {
	for _, m := range []string{"scripted", "claude-opus-4-6", "claude-sonnet-4-5", "claude-haiku-4-5",
		"claude-3-5-haiku", "gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "o3", "o4-mini"} {
		if _, ok := Default().Lookup(m); !ok {
			t.Errorf("%s is not priced", m)
		}
	}
}

func TestCostMultipliers(t *testing.T) {
	u := protocol.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000,
		CacheCreationInputTokens: 1_000_000, CacheReadInputTokens: 1_000_000}
	// Sonnet 4.5: 3 in, 15 out, write 1.25x = 3.75 (5m) or 2x = 6 (1h), read 0.1x = 0.30.
	got, ok := Cost("claude-sonnet-4-5", u, "5m")
	if !ok || !near(got, 3+15+3.75+0.30) {
		t.Fatalf("5m cost = %v %v", got, ok)
	}
	got, _ = Cost("claude-sonnet-4-5", u, "1h")
	if !near(got, 3+15+6+0.30) {
		t.Fatalf("1h cost = %v", got)
	}
	// A dated snapshot falls back to its base id.
	if _, ok := Cost("claude-sonnet-4-5-20250929", u, ""); !ok {
		t.Fatal("dated snapshot not priced")
	}
	if _, ok := Cost("gpt-4o-2024-08-06", u, ""); !ok {
		t.Fatal("dated OpenAI snapshot not priced")
	}
	// OpenAI: cached input at its own price.
	got, _ = Cost("gpt-4o", protocol.Usage{InputTokens: 1_000_000, CacheReadInputTokens: 1_000_000}, "")
	if !near(got, 2.5+1.25) {
		t.Fatalf("gpt-4o = %v", got)
	}
	if c, ok := Cost("scripted", u, ""); !ok || c != 0 {
		t.Fatalf("scripted = %v %v, want priced at 0", c, ok)
	}
	if _, ok := Cost("no-such-model", u, ""); ok {
		t.Fatal("unknown model priced")
	}
}

func TestParseTableErrors(t *testing.T) {
	if _, err := ParseTable([]byte("models:\n  x: {input: 1}\n")); err == nil {
		t.Fatal("missing output accepted")
	}
	if _, err := ParseTable([]byte("models:\n  x: {input: 1, output: 2, bogus: 3}\n")); err == nil {
		t.Fatal("unknown key accepted")
	}
	if _, err := ParseTable([]byte("models:\n  x: {input: 1, output: 2}\n  y: {input: 1, output: 2, aliases: [x]}\n")); err == nil {
		t.Fatal("duplicate id accepted")
	}
}

func TestAccumulatorTotalsAndUnknown(t *testing.T) {
	a := NewAccumulator(nil)
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.Add("claude-haiku-4-5", "executor", "5m", protocol.Usage{InputTokens: 1000, OutputTokens: 100})
			a.Add("gpt-4o-mini", "planner", "", protocol.Usage{InputTokens: 500, CacheReadInputTokens: 500})
		}()
	}
	wg.Wait()
	r := a.Report()
	if r.Calls != 100 || r.InputTokens != 50*1500 || r.CacheReadInputTokens != 50*500 {
		t.Fatalf("totals: %+v", r)
	}
	if r.ByRole["planner"].InputTokens != 50*500 || r.ByModel["claude-haiku-4-5"].OutputTokens != 5000 {
		t.Fatalf("breakdown: %+v %+v", r.ByRole, r.ByModel)
	}
	want := 50 * (1000*1.0 + 100*5.0 + 500*0.15 + 500*0.075) / 1e6
	if r.CostUSD == nil || !near(*r.CostUSD, want) {
		t.Fatalf("cost = %v, want %v", r.CostUSD, want)
	}

	a.Add("mystery-model", "miner", "", protocol.Usage{InputTokens: 10})
	r = a.Report()
	if r.CostUSD != nil || len(r.UnpricedModels) != 1 || r.UnpricedModels[0] != "mystery-model" {
		t.Fatalf("unknown model: cost %v, unpriced %v", r.CostUSD, r.UnpricedModels)
	}

	b := NewAccumulator(nil)
	b.Add("scripted", "subagent", "", protocol.Usage{InputTokens: 10})
	b.Merge(r)
	if got := b.Report(); got.CostUSD != nil || got.Calls != r.Calls+1 {
		t.Fatalf("merge: %+v", got)
	}
}
