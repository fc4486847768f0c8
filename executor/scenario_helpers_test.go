package executor

import (
	"encoding/json"
	"os"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm/llmtest"
)

// scenario is the committed multi-step session of testdata/scenario: a billing-support agent
// with eight tools investigates a customer report in four model turns (five tool calls that
// answer recorded JSON: a directory listing, search hits, table rows and log lines).
type scenario struct {
	dir   string // the tools folder
	cfg   *config.Config
	task  string
	turns []llmtest.Reply
}

func loadScenario(t testing.TB) scenario {
	t.Helper()
	cfg, err := config.Load(testdata(t, "scenario", "agent.yaml"))
	if err != nil {
		t.Fatalf("scenario config: %v", err)
	}
	data, err := os.ReadFile(testdata(t, "scenario", "script.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Task  string `yaml:"task"`
		Turns []struct {
			Text      string `yaml:"text"`
			ToolCalls []struct {
				Name string         `yaml:"name"`
				Args map[string]any `yaml:"args"`
			} `yaml:"tool_calls"`
		} `yaml:"turns"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("scenario script: %v", err)
	}
	s := scenario{dir: testdata(t, "scenario", "tools"), cfg: cfg, task: doc.Task}
	for _, turn := range doc.Turns {
		r := llmtest.Reply{Text: turn.Text}
		for _, c := range turn.ToolCalls {
			// Round-trip through JSON so YAML's map types become plain JSON objects.
			b, _ := json.Marshal(c.Args)
			var args map[string]any
			_ = json.Unmarshal(b, &args)
			r.ToolCalls = append(r.ToolCalls, llmtest.ToolCall{Name: c.Name, Args: args})
		}
		s.turns = append(s.turns, r)
	}
	return s
}

// script answers every session with the scenario's turns, in order, over and over.
func (s scenario) script() llmtest.Script {
	return llmtest.Script{Respond: func(r llmtest.Request) llmtest.Reply { return s.turns[r.N%len(s.turns)] }}
}

// anthropic points the scenario's model at a fake server, with a key set for this test only.
func (s scenario) anthropic(t *testing.T, fake *llmtest.Server) *config.Config {
	t.Helper()
	cfg := *s.cfg
	cfg.LLM.BaseURL = fake.URL
	t.Setenv(cfg.LLM.APIKeyEnv, "sk-ant-test")
	return &cfg
}
