package usage

import (
	"testing"

	"github.com/skein-mesh/skein/pkg/protocol"
)

func f(v float64) *float64 { return &v }

func TestModelLimitsFromTheOneTable(t *testing.T) {
	for model, want := range map[string]Limits{
		"claude-sonnet-4-5":         {ContextWindow: 200000, MaxOutput: 64000},
		"claude-haiku-4-5-20251001": {ContextWindow: 200000, MaxOutput: 64000}, // alias
		"gpt-4o-2024-08-06":         {ContextWindow: 128000, MaxOutput: 16384}, // dated snapshot
		"claude-3-haiku":            {ContextWindow: 200000, MaxOutput: 4096},
	} {
		got, ok := ModelLimits(model)
		if !ok || got != want {
			t.Errorf("%s: %+v %v; want %+v", model, got, ok, want)
		}
	}
	if _, ok := ModelLimits("my-finetune"); ok {
		t.Error("an unknown model has known limits")
	}
}

func TestTableOverrides(t *testing.T) {
	base := Default()
	over, err := base.With(map[string]Entry{
		"my-finetune":       {ContextWindow: 16000, MaxOutput: 2000, Input: f(1), Output: f(2)},
		"claude-sonnet-4-5": {ContextWindow: 1000000}, // opt into the 1M window, keep the prices
		"limits-only":       {ContextWindow: 8000},
	})
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := over.LookupLimits("my-finetune"); l.ContextWindow != 16000 || l.MaxOutput != 2000 {
		t.Errorf("my-finetune limits %+v", l)
	}
	if usd, ok := over.Cost("my-finetune", protocolUsage(1_000_000, 1_000_000), ""); !ok || usd != 3 {
		t.Errorf("my-finetune cost %v %v; want $3", usd, ok)
	}
	if l, _ := over.LookupLimits("claude-sonnet-4-5"); l.ContextWindow != 1000000 || l.MaxOutput != 64000 {
		t.Errorf("override lost the output limit: %+v", l)
	}
	if p, _ := over.Lookup("claude-sonnet-4-5"); p.Input != 3 {
		t.Errorf("override lost the price: %+v", p)
	}
	if _, ok := over.Cost("limits-only", protocolUsage(1, 1), ""); ok {
		t.Error("a model given only limits became priced")
	}
	if l, _ := base.LookupLimits("claude-sonnet-4-5"); l.ContextWindow != 200000 {
		t.Error("With changed the table it was called on")
	}
	if _, err := base.With(map[string]Entry{"x": {Input: f(1)}}); err == nil {
		t.Error("input without output accepted")
	}
}

func protocolUsage(in, out int64) protocol.Usage {
	return protocol.Usage{InputTokens: in, OutputTokens: out}
}
