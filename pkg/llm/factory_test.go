package llm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm/llmtest"
)

func TestCheckKey(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("MY_KEY", "")
	err := CheckKey(config.LLM{Provider: "anthropic"})
	if err == nil || err.Error() != "ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=... or set llm.api_key_env in agent.yaml" {
		t.Fatalf("anthropic: %v", err)
	}
	if err := CheckKey(config.LLM{Provider: "openai", APIKeyEnv: "MY_KEY"}); err == nil || !strings.HasPrefix(err.Error(), "MY_KEY is not set") {
		t.Fatalf("custom env: %v", err)
	}
	t.Setenv("MY_KEY", "k")
	if err := CheckKey(config.LLM{Provider: "openai", APIKeyEnv: "MY_KEY"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "")
	for _, u := range []string{"http://localhost:11434/v1", "http://127.0.0.1:8000/v1", "http://[::1]:8080/v1"} {
		if err := CheckKey(config.LLM{Provider: "openai", BaseURL: u}); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
	}
	if err := CheckKey(config.LLM{Provider: "openai", BaseURL: "https://example.com/v1"}); err == nil {
		t.Fatal("remote openai-compatible server without a key accepted")
	}
	if err := CheckKey(config.LLM{Provider: "scripted"}); err != nil {
		t.Fatal(err)
	}
	if err := CheckKey(config.LLM{Provider: "bogus"}); err == nil {
		t.Fatal("unknown provider accepted")
	}
}

func TestMinCacheableTokens(t *testing.T) {
	for model, want := range map[string]int{
		"claude-sonnet-4-5-20250929": 1024, "claude-opus-4-6": 4096, "claude-haiku-4-5": 4096,
		"claude-3-5-haiku-latest": 2048, "claude-opus-4-8": 1024, "claude-opus-4-1": 1024,
		"claude-opus-5": 512, "some-new-model": DefaultMinCacheable,
	} {
		if got := MinCacheableTokens(model); got != want {
			t.Errorf("%s: %d, want %d", model, got, want)
		}
	}
}

func TestNewBuildsEveryProvider(t *testing.T) {
	script := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(script, []byte("rules:\n  - reply: {text: ok}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := llmtest.NewOpenAI(t, llmtest.Script{})
	t.Setenv("OPENAI_API_KEY", "sk-test")
	for _, cfg := range []config.LLM{
		{Provider: "anthropic", Model: "claude-haiku-4-5"},
		{Provider: "openai", Model: "gpt-4.1-mini", BaseURL: srv.URL},
		{Provider: "scripted", Script: script},
	} {
		b, err := New(cfg)
		if err != nil || b.Provider() != cfg.Provider {
			t.Fatalf("%s: %v", cfg.Provider, err)
		}
	}
	b, _ := New(config.LLM{Provider: "openai", Model: "gpt-4.1-mini", BaseURL: srv.URL})
	req := Request{Messages: []Message{{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "hi"}}}}}
	if _, err := b.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Fatalf("auth %q", got)
	}
	if _, err := New(config.LLM{Provider: "nope"}); err == nil {
		t.Fatal("unknown provider built")
	}
	if _, err := New(config.LLM{Provider: "scripted"}); err == nil {
		t.Fatal("scripted without a script built")
	}
}
