package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/redact"
)

// A key of no known shape, under variable names that look like no secret, is masked once a
// config naming those variables is loaded: in trace text, tool arguments and log lines.
func TestLoadConfigMasksTheConfiguredKeys(t *testing.T) {
	secrets := map[string]string{
		"OPENROUTER":           "q7Zx-plain-0a1b2c3d4e5f-top-level",
		"PLANNER_PROVIDER_VAR": "planner-unshaped-9f8e7d6c5b4a",
		"EXEC_LLM":             "executor-unshaped-1029384756",
		"MINER_LLM":            "miner-unshaped-5647382910zz",
	}
	const httpToken = "open-sesame-0123456789abcdef"
	for name, v := range secrets {
		t.Setenv(name, v)
	}
	all := []string{httpToken}
	for _, v := range secrets {
		all = append(all, v)
	}
	// Without the config, nothing about these values or names says "secret".
	for _, v := range all {
		if got := redact.String("the value is " + v); !strings.Contains(got, v) {
			t.Fatalf("%q is masked before any config names it (%q): the test would prove nothing", v, got)
		}
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	yaml := `
llm:
  provider: anthropic
  api_key_env: OPENROUTER
planner:
  llm:
    provider: openai
    model: gpt-4o-mini
    api_key_env: PLANNER_PROVIDER_VAR
executor:
  llm:
    provider: anthropic
    api_key_env: EXEC_LLM
miner:
  enabled: true
  llm:
    provider: anthropic
    api_key_env: MINER_LLM
gateway:
  http_token: ` + httpToken + `
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err != nil {
		t.Fatal(err)
	}

	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{ReplaceAttr: redactAttr}))
	for _, v := range all {
		if got := redact.String("401 from provider for " + v + " (retrying)"); strings.Contains(got, v) || !strings.Contains(got, "(retrying)") {
			t.Errorf("text: %q, want %q masked and the rest kept", got, v)
		}
		if got := redact.JSON(json.RawMessage(`{"note":"` + v + `"}`)); strings.Contains(string(got), v) {
			t.Errorf("tool arguments: %s still hold %q", got, v)
		}
		log.Error("model call failed", "err", errors.New("bad key "+v))
	}
	for _, v := range all {
		if strings.Contains(logged.String(), v) {
			t.Errorf("log lines hold %q:\n%s", v, logged.String())
		}
	}
}
