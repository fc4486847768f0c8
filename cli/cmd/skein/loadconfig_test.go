package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/redact"
)

// Every CLI command loads its config through loadConfig, and the key it names is masked from
// then on, whatever the variable is called and whatever the key looks like.
func TestCLILoadConfigMasksTheConfiguredKey(t *testing.T) {
	const key = "cli-unshaped-0f1e2d3c4b5a6978"
	t.Setenv("MODEL_PROVIDER_VAR", key)
	if got := redact.String("using " + key); !strings.Contains(got, key) {
		t.Fatalf("%q is masked before any config names it: the test would prove nothing", got)
	}
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte("llm:\n  provider: openai\n  model: gpt-4o-mini\n  api_key_env: MODEL_PROVIDER_VAR\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := &cobra.Command{}
	cmd.Flags().StringArray("config", []string{path}, "")
	if _, err := loadConfig(cmd); err != nil {
		t.Fatal(err)
	}
	if got := redact.String("401 for " + key); strings.Contains(got, key) || !strings.Contains(got, "401 for "+redact.Mask) {
		t.Errorf("got %q, want the key masked", got)
	}
}
