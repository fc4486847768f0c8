package providers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm"
)

func TestEveryProviderRegistered(t *testing.T) {
	script := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(script, []byte("rules:\n  - reply: {text: ok}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []config.LLM{
		{Provider: "anthropic", Model: "claude-haiku-4-5"},
		{Provider: "openai", Model: "gpt-4o-mini"},
		{Provider: "scripted", Script: script},
	} {
		b, err := llm.New(cfg)
		if err != nil || b.Provider() != cfg.Provider {
			t.Fatalf("%s: %v", cfg.Provider, err)
		}
	}
	if _, err := llm.New(config.LLM{Provider: "nope"}); err == nil {
		t.Fatal("unknown provider built")
	}
}
