package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadOverDefaultsResolvesRelativePaths(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "script.yaml", "rules: []\n")
	if err := os.MkdirAll(filepath.Join(dir, "tools", "agent_tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := write(t, dir, "agent.yaml", `
agent:
  name: demo
llm:
  provider: scripted
  model: scripted
  script: script.yaml
tools:
  manifest_dirs: [tools/agent_tools]
  enabled: [hello]
planner:
  llm:
    model: cheap
`)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Agent.Name != "demo" || cfg.Agent.MaxTurns != 10 {
		t.Fatalf("agent = %+v, want name demo and the default max_steps 10", cfg.Agent)
	}
	if want := filepath.Join(dir, "script.yaml"); cfg.LLM.Script != want {
		t.Fatalf("llm.script = %q, want %q", cfg.LLM.Script, want)
	}
	if want := filepath.Join(dir, "tools", "agent_tools"); cfg.Tools.ManifestDirs[0] != want {
		t.Fatalf("manifest dir = %q, want %q", cfg.Tools.ManifestDirs[0], want)
	}
	if cfg.Tools.ResultFormat != "toon" || cfg.Memory.SimilarityThreshold != 0.85 {
		t.Fatalf("defaults lost: %+v %+v", cfg.Tools, cfg.Memory)
	}
	pl := cfg.ForRole("planner")
	if pl.Model != "cheap" || pl.Provider != "scripted" || pl.Script != cfg.LLM.Script {
		t.Fatalf("planner.llm did not inherit the default provider: %+v", pl)
	}
	if ex := cfg.ForRole("executor"); ex.Model != "scripted" {
		t.Fatalf("executor without override = %+v", ex)
	}
}

func TestAgentDeclaration(t *testing.T) {
	p := write(t, t.TempDir(), "agent.yaml", `
agent:
  name: researcher
  description: Finds one fact.
  input_schema:
    type: object
    properties:
      question: {type: string}
    required: [question]
`)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(cfg.Agent.InputSchemaJSON()); got != `{"properties":{"question":{"type":"string"}},"required":["question"],"type":"object"}` ||
		cfg.Agent.Description != "Finds one fact." {
		t.Fatalf("declaration = %q, %s", cfg.Agent.Description, got)
	}
	if Default().Agent.InputSchemaJSON() != nil {
		t.Fatal("an agent that declares no schema has one")
	}
}

func TestEmptyFileMeansDefaults(t *testing.T) {
	p := write(t, t.TempDir(), "agent.yaml", "")
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LLM.Provider != "anthropic" {
		t.Fatalf("provider = %q", cfg.LLM.Provider)
	}
}

func TestErrorsNameKeyAndFile(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"unknown key", "agent:\n  nmae: x\n", []string{"agent.yaml:2", "agent.nmae", "unknown key"}},
		{"unknown nested key", "tools:\n  retrieval:\n    topk: 3\n", []string{"tools.retrieval.topk", "unknown key"}},
		{"wrong type", "agent:\n  max_turns: many\n", []string{"agent.yaml:2", "agent.max_turns", "wrong type", "an integer"}},
		{"wrong type in a list", "tools:\n  enabled: [a, [b]]\n", []string{"agent.yaml:2", "tools.enabled", "wrong type"}},
		{"bad yaml", "agent: [\n", []string{"agent.yaml", "invalid YAML"}},
		{"bad value", "tools:\n  result_format: xml\n", []string{"tools.result_format", "toon, json or auto"}},
		{"missing script", "llm:\n  provider: scripted\n  model: s\n  script: nope.yaml\n", []string{"llm.script", "does not exist"}},
		{"missing tool dir", "tools:\n  manifest_dirs: [nope]\n", []string{"tools.manifest_dirs[0]", "does not exist"}},
		{"bad provider", "llm:\n  provider: bard\n", []string{"llm.provider", "anthropic, openai or scripted"}},
		{"bad role override", "miner:\n  llm:\n    cache: sometimes\n", []string{"miner.llm.cache", "auto or off"}},
		{"bad agent name", "agent:\n  name: my agent\n", []string{"agent.name"}},
		{"bad agent tool", "tools:\n  agents: [ok, \"a.b\"]\n", []string{"tools.agents[1]", "agent name"}},
		{"agent as its own tool", "agent:\n  name: boss\ntools:\n  agents: [helper, boss]\n", []string{"tools.agents[1]", "itself"}},
		{"agent schema not an object", "agent:\n  input_schema: {type: string}\n", []string{"agent.input_schema", `"type": "object"`}},
		{"agent schema invalid", "agent:\n  input_schema: {type: object, required: 3}\n", []string{"agent.input_schema", "not a valid JSON Schema"}},
		{"reversed uid range", "tools:\n  sandbox:\n    uids: 2000-1000\n", []string{"tools.sandbox.uids", "first-last"}},
		{"uid range of one", "tools:\n  sandbox:\n    uids: \"1000\"\n", []string{"tools.sandbox.uids", "first-last"}},
		{"size with a bad unit", "mesh:\n  limits:\n    work:\n      max_bytes: 1KX\n", []string{"agent.yaml:4", "mesh.limits.work.max_bytes", `got a string "1KX"`, "64MiB"}},
		{"size as a list", "mesh:\n  limits:\n    bucket_max_bytes: [1]\n", []string{"agent.yaml:3", "mesh.limits.bucket_max_bytes", "got a list", "a size in bytes"}},
		{"negative size", "mesh:\n  limits:\n    trace: {max_bytes: -1}\n", []string{"mesh.limits.trace", "must not be negative"}},
		{"int64 wants an integer", "mesh:\n  limits:\n    work: {max_msgs: lots}\n", []string{"mesh.limits.work.max_msgs", "want an integer"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := write(t, t.TempDir(), "agent.yaml", c.body)
			_, err := Load(p)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// agent.max_turns bounds a step's model turns; max_steps, its old name, is still read.
func TestMaxTurnsAndItsOldName(t *testing.T) {
	for body, want := range map[string]int{"agent: {max_turns: 4}\n": 4, "agent: {max_steps: 6}\n": 6, "agent: {name: a}\n": 10, "": 10} {
		cfg, err := Load(write(t, t.TempDir(), "agent.yaml", body))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if cfg.Agent.MaxTurns != want {
			t.Errorf("%q: max turns %d, want %d", body, cfg.Agent.MaxTurns, want)
		}
	}
	_, err := Load(write(t, t.TempDir(), "agent.yaml", "agent: {max_turns: 4, max_steps: 6}\n"))
	if err == nil || !strings.Contains(err.Error(), "agent.max_steps") || !strings.Contains(err.Error(), "max_turns only") {
		t.Errorf("both names: %v; want an error saying to keep max_turns", err)
	}
	_, err = Load(write(t, t.TempDir(), "agent.yaml", "agent: {max_turns: 0}\n"))
	if err == nil || !strings.Contains(err.Error(), "agent.max_turns") {
		t.Errorf("max_turns 0: %v; want an error naming agent.max_turns", err)
	}
}

// A size in bytes takes an integer or a number with a unit, decimal or binary as written.
func TestByteSizesTakeUnits(t *testing.T) {
	body := "tools:\n  max_output_bytes: 64KiB\nmesh:\n  limits:\n    work: {max_bytes: 1KB}\n    trace: {max_bytes: 2 GiB}\n" +
		"    usage: {max_bytes: 1.5MB}\n    dlq: {max_bytes: 4096}\n    bucket_max_bytes: 512mib\n"
	cfg, err := Load(write(t, t.TempDir(), "agent.yaml", body))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Mesh.Limits
	for name, c := range map[string]struct{ got, want ByteSize }{
		"tools.max_output_bytes": {cfg.Tools.MaxOutput, 64 << 10}, "work.max_bytes": {l.Work.MaxBytes, 1000},
		"trace.max_bytes": {l.Trace.MaxBytes, 2 << 30}, "usage.max_bytes": {l.Usage.MaxBytes, 1_500_000},
		"dlq.max_bytes": {l.DLQ.MaxBytes, 4096}, "bucket_max_bytes": {l.BucketMaxBytes, 512 << 20},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", name, c.got, c.want)
		}
	}
}

func TestMissingFileSaysHowToCreateOne(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "agent.yaml"))
	if err == nil || !strings.Contains(err.Error(), "skein init") {
		t.Fatalf("err = %v", err)
	}
}

func TestProviderKeysNeverGoOverPlainHTTPToAnotherHost(t *testing.T) {
	cases := []struct {
		yaml string
		bad  string // key named in the error, "" for valid
	}{
		{"llm: {provider: openai, model: m, base_url: 'http://10.0.0.5:8000/v1'}", "llm.base_url"},
		{"llm: {provider: anthropic, model: m, base_url: 'http://proxy.example.com'}", "llm.base_url"},
		{"llm: {provider: openai, model: m, base_url: 'ftp://x'}", "llm.base_url"},
		{"llm: {provider: openai, model: m, base_url: 'http://10.0.0.5:8000/v1', allow_insecure: true}", ""},
		{"llm: {provider: openai, model: m, base_url: 'http://127.0.0.1:11434/v1'}", ""},
		{"llm: {provider: openai, model: m, base_url: 'http://localhost:11434/v1'}", ""},
		{"llm: {provider: openai, model: m, base_url: 'http://[::1]:8080'}", ""},
		{"llm: {provider: openai, model: m, base_url: 'https://api.example.com/v1'}", ""},
		{"executor: {llm: {model: x, provider: openai, base_url: 'http://10.1.1.1'}}", "executor.llm.base_url"},
		{"llm: {allow_insecure: true}\nexecutor: {llm: {model: x}}", ""},
		{"memory: {embedder: openai, embed_url: 'http://10.0.0.9/v1'}", "memory.embed_url"},
		{"memory: {embedder: ollama, embed_url: 'http://10.0.0.9:11434'}", ""},
	}
	for _, c := range cases {
		_, err := Parse("agent.yaml", []byte(c.yaml))
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: unexpected error %v", c.yaml, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad+": ")):
			t.Errorf("%s: want an error naming %s, got %v", c.yaml, c.bad, err)
		case c.bad != "" && !strings.Contains(err.Error(), "allow_insecure"):
			t.Errorf("%s: the error should name allow_insecure: %v", c.yaml, err)
		}
	}
}

func TestMeshTLSAndCredsPaths(t *testing.T) {
	_, err := Parse("agent.yaml", []byte("mesh: {creds_file: nope.nk, tls: {cert: c.pem}}"))
	for _, want := range []string{"mesh.creds_file: file", "mesh.tls.cert: file", "mesh.tls: cert and key go together"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}
