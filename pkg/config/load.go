package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools/schema"
	"github.com/skein-mesh/skein/pkg/tools/uidrange"
	"github.com/skein-mesh/skein/pkg/usage"
)

// Default returns the configuration every file is loaded over.
func Default() *Config {
	return &Config{
		Agent: Agent{
			Name:         "assistant",
			MaxTurns:     10,
			SystemPrompt: "You are a careful assistant. Use the tools when they help, and answer concisely.",
			MaxDepth:     3,
			ProfileLearning: ProfileLearning{Enabled: true, MinSessions: 2, MaxTokens: 1500, PatchTokens: 60,
				Section: "Learned rules"},
		},
		LLM: LLM{
			Provider:      "anthropic",
			Model:         "claude-sonnet-4-5",
			MaxTokens:     1024,
			Cache:         "auto",
			CacheTTL:      "5m",
			ContextBudget: 0.8,
			TimeoutS:      120,
			MaxRetries:    5,
		},
		Tools: Tools{
			MaxParallel:  4,
			ResultFormat: "toon",
			TimeoutS:     30,
			MaxOutput:    1 << 20,
			Retrieval:    Retrieval{TopK: 6, MaxWiden: 3},
			// A few thousand tokens: room for a real listing or table, not for a whole log.
			MaxResultTokens: 4000,
		},
		Memory: Memory{
			Enabled:             true,
			TopK:                5,
			SimilarityThreshold: 0.85,
			PromotionSessions:   3,
			PromotionHelpful:    1,
			FeedbackWindow:      10,
			DemoteHarmful:       3,
			GuidelineMaxTokens:  30,
			TokenBudget:         400,
			ToolFloor:           0.30,
			PatternShare:        0.2,
			Capacity:            500,
			EvictEvery:          "1h",
			Store:               "kv",
			Embedder:            "minilm",
			ShareMaxFindings:    3,
			ShareMaxChars:       300,
			ConversationFacts:   true,
			Cases: MemoryCases{Enabled: true, Capacity: 1000, MinCalls: 2, Examples: 1, ExampleBudget: 300,
				MinSimilarity: 0.55, MinQuality: 0.6},
			Skills: MemorySkills{Enabled: true, Capacity: 200, MinCases: 3, MatureCases: 4, MatureConfidence: 0.7,
				RetireConfidence: 0.5, IntentFloor: 0.7, ApproachFloor: 0.6, Show: true},
		},
		Planner:  Planner{Mode: "off", MaxItems: 8},
		Executor: Executor{Stream: Stream{Enabled: true, FlushMS: 50, MaxBytes: 4096}},
		Miner:    Miner{Enabled: true},
		Mesh:     Mesh{Namespace: protocol.DefaultNamespace, Replicas: 1},
		Gateway:  Gateway{MaxEventStreams: 8},
	}
}

// Error is a configuration problem, naming the file and the key.
type Error struct {
	File string
	Key  string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Errors collects every problem found in one file, so a user fixes them in one pass.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Load reads path over Default, resolves relative paths against the file's folder and validates.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, &Error{File: path, Msg: "config file not found (create one with `skein init`)"}
		}
		return nil, &Error{File: path, Msg: err.Error()}
	}
	return Parse(path, data)
}

// Parse decodes data as if read from path.
func Parse(path string, data []byte) (*Config, error) {
	cfg := Default()
	defaultTurns := cfg.Agent.MaxTurns
	cfg.Agent.MaxTurns = turnsUnset // to tell whether the file sets max_turns
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// An empty file means "all defaults".
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(path, data, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	switch a := &cfg.Agent; {
	case a.MaxTurns != turnsUnset && a.MaxStepsOldName != 0:
		return nil, &Error{File: abs, Key: "agent.max_steps", Msg: "is the old name of agent.max_turns, which the file sets too: keep max_turns only"}
	case a.MaxStepsOldName != 0:
		a.MaxTurns = a.MaxStepsOldName
	case a.MaxTurns == turnsUnset:
		a.MaxTurns = defaultTurns
	}
	cfg.Path = abs
	cfg.resolvePaths(filepath.Dir(abs))
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// turnsUnset stands in agent.max_turns while a file is read; no file can write it.
const turnsUnset = math.MinInt

var (
	yamlLineRE   = regexp.MustCompile(`^line (\d+): (.*)$`)
	anyLineRE    = regexp.MustCompile(`line (\d+)`)
	unknownKey   = regexp.MustCompile(`field (\S+) not found in type config\.(\w+)`)
	typeMismatch = regexp.MustCompile("cannot unmarshal !!(\\w+) (?:`([^`]*)` )?into (\\S+)")
)

// section maps Go type names to YAML paths so errors name keys the user wrote.
var section = map[string]string{
	"Config": "", "Agent": "agent.", "ProfileLearning": "agent.profile_learning.", "LLM": "llm.", "Tools": "tools.", "Retrieval": "tools.retrieval.", "ToolSandbox": "tools.sandbox.",
	"MCPServer": "tools.mcp.<server>.", "MCPSandbox": "tools.mcp.<server>.sandbox.",
	"Memory": "memory.", "Planner": "planner.", "Executor": "executor.", "Toolhost": "toolhost.", "Miner": "miner.", "Mesh": "mesh.",
	"TLS": "mesh.tls.", "Gateway": "gateway.",
}

func yamlError(path string, data []byte, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var out Errors
		for _, msg := range te.Errors {
			e := &Error{File: path, Msg: msg}
			if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
				e.Line, _ = strconv.Atoi(m[1])
				e.Msg = m[2]
			}
			if m := unknownKey.FindStringSubmatch(e.Msg); m != nil {
				e.Key = section[m[2]] + m[1]
				e.Msg = "unknown key (check the spelling; see `skein init` for a full example)"
			} else if m := typeMismatch.FindStringSubmatch(e.Msg); m != nil {
				e.Key = keyAtLine(data, e.Line)
				got := yamlKind(m[1])
				if m[2] != "" {
					got += fmt.Sprintf(" %q", m[2])
				}
				e.Msg = fmt.Sprintf("wrong type: got %s, want %s", got, goTypeName(m[3]))
			}
			out = append(out, e)
		}
		return out
	}
	msg := err.Error()
	e := &Error{File: path, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	if m := anyLineRE.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
	}
	return e
}

func yamlKind(tag string) string {
	switch tag {
	case "seq":
		return "a list"
	case "map":
		return "a mapping"
	case "str":
		return "a string"
	case "int":
		return "an integer"
	case "float":
		return "a number"
	case "bool":
		return "a boolean"
	}
	return tag
}

func goTypeName(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case t == "int":
		return "an integer"
	case t == "float64":
		return "a number"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case t == "config.ByteSize":
		return sizeHint
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "a mapping"
}

func (c *Config) resolvePaths(dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	for i, d := range c.Tools.ManifestDirs {
		c.Tools.ManifestDirs[i] = abs(d)
	}
	for _, l := range c.llms() {
		l.Script = abs(l.Script)
	}
	c.Mesh.CredsFile = abs(c.Mesh.CredsFile)
	c.Agent.Profile = abs(c.Agent.Profile)
	c.Mesh.TLS.CA, c.Mesh.TLS.Cert, c.Mesh.TLS.Key = abs(c.Mesh.TLS.CA), abs(c.Mesh.TLS.Cert), abs(c.Mesh.TLS.Key)
	if c.Tools.Sandbox.ScratchDir != "" {
		c.Tools.Sandbox.ScratchDir = abs(c.Tools.Sandbox.ScratchDir)
	}
	for name, s := range c.Tools.MCP {
		c.Tools.MCP[name] = s.resolvePaths(dir)
	}
}

// llms returns every model binding in the file, the default first.
func (c *Config) llms() []*LLM {
	out := []*LLM{&c.LLM}
	for _, l := range []*LLM{c.Planner.LLM, c.Executor.LLM, c.Miner.LLM} {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// Validate checks values; every problem is reported with its key.
func (c *Config) Validate() Errors {
	var errs Errors
	bad := func(key, format string, a ...any) {
		errs = append(errs, &Error{File: c.Path, Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	for _, check := range []func(reporter){
		c.validateAgent, c.validateModels, c.validateAgentTool, c.validateLLMs, c.validateToolSources,
		c.validateWorkers, c.validateToolCalls, c.validateGateway, c.validateSandbox, c.validateMCP,
		c.validateMemory, c.validateMemoryStore, c.validatePlanner, c.validateMesh, c.validateMeshAuth,
	} {
		check(bad)
	}
	return errs
}

// reporter records one problem under its key.
type reporter func(key, format string, a ...any)

// validateAgent checks the agent: its name, step limit and budget.
func (c *Config) validateAgent(bad reporter) {
	if err := protocol.IDAgent.Check(c.Agent.Name); err != nil {
		bad("agent.name", "%v", err)
	}
	if c.Agent.MaxTurns < 1 || c.Agent.MaxTurns > 1000 {
		bad("agent.max_turns", "must be between 1 and 1000, got %d", c.Agent.MaxTurns)
	}
	if b := c.Agent.Budget; b.MaxInputTokens < 0 || b.MaxOutputTokens < 0 || b.MaxUSD < 0 || b.DeadlineS < 0 ||
		b.MaxTurns < 0 || b.MaxToolCalls < 0 || b.MaxDepth < 0 || b.MaxFanout < 0 {
		bad("agent.budget", "limits must be >= 0 (0 means no limit)")
	}
}

// validateModels checks the price table `models:`.
func (c *Config) validateModels(bad reporter) {
	if _, err := usage.Default().With(c.Models); err != nil {
		bad("models", "%v", err)
	}
}

// validateAgentTool checks what an agent offered as a tool declares: description, input schema, depth.
func (c *Config) validateAgentTool(bad reporter) {
	if len(c.Agent.Description) > protocol.MaxToolDescription {
		bad("agent.description", "at most %d bytes, got %d", protocol.MaxToolDescription, len(c.Agent.Description))
	}
	if c.Agent.InputSchema != nil {
		if raw, err := json.Marshal(c.Agent.InputSchema); err != nil {
			bad("agent.input_schema", "cannot be written as JSON: %v", err)
		} else if _, err := schema.Compile(raw); err != nil {
			bad("agent.input_schema", "%v", err)
		}
	}
	if pl := c.Agent.ProfileLearning; pl.MinSessions < 2 || pl.MinSessions > 100 {
		bad("agent.profile_learning.min_sessions", "must be between 2 and 100, got %d", pl.MinSessions)
	}
	if pl := c.Agent.ProfileLearning; pl.MaxTokens < 1 || pl.MaxTokens > 20000 {
		bad("agent.profile_learning.max_tokens", "must be between 1 and 20000, got %d", pl.MaxTokens)
	}
	if pl := c.Agent.ProfileLearning; pl.PatchTokens < 1 || pl.PatchTokens > 500 {
		bad("agent.profile_learning.patch_tokens", "must be between 1 and 500, got %d", pl.PatchTokens)
	}
	if strings.TrimSpace(c.Agent.ProfileLearning.Section) == "" {
		bad("agent.profile_learning.section", "must name the section learned rules go to")
	}
	if c.Agent.MaxDepth < 0 || c.Agent.MaxDepth > 10 {
		bad("agent.max_depth", "must be between 0 and 10, got %d", c.Agent.MaxDepth)
	}
}

// validateLLMs checks the default model binding and each role's override, filling the override from the default first.
func (c *Config) validateLLMs(bad reporter) {
	c.validateLLM("llm", &c.LLM, bad)
	for key, l := range map[string]*LLM{"planner.llm": c.Planner.LLM, "executor.llm": c.Executor.LLM, "miner.llm": c.Miner.LLM} {
		if l != nil {
			c.inherit(l)
			c.validateLLM(key, l, bad)
		}
	}
}

// validateToolSources checks where tools come from: manifest folders, enabled tools, agents offered as tools.
func (c *Config) validateToolSources(bad reporter) {
	for i, d := range c.Tools.ManifestDirs {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			bad(fmt.Sprintf("tools.manifest_dirs[%d]", i), "folder %s does not exist", d)
		}
	}
	for i, n := range c.Tools.Enabled {
		if err := protocol.IDTool.Check(n); err != nil {
			bad(fmt.Sprintf("tools.enabled[%d]", i), "%v", err)
		}
	}
	for i, n := range c.Tools.Agents {
		key := fmt.Sprintf("tools.agents[%d]", i)
		if err := protocol.IDAgent.Check(n); err != nil {
			bad(key, "%v", err)
		} else if n == c.Agent.Name {
			// An agent offered to itself would recurse until max_depth stops it.
			bad(key, "names this agent itself (%q); an agent cannot be its own tool", n)
		}
	}
}

// validateWorkers checks the executor's and the toolhost's pool sizes.
func (c *Config) validateWorkers(bad reporter) {
	if c.Executor.Concurrency < 0 {
		bad("executor.concurrency", "must not be negative (0 derives it from the machine), got %d", c.Executor.Concurrency)
	}
	if c.Executor.MaxWaiting < 0 {
		bad("executor.max_waiting", "must not be negative (0: 8 × executor.concurrency), got %d", c.Executor.MaxWaiting)
	}
	if st := c.Executor.Stream; st.FlushMS < 1 || st.FlushMS > 10000 {
		bad("executor.stream.flush_ms", "must be 1 to 10000 (milliseconds a piece of text may wait), got %d", st.FlushMS)
	}
	if st := c.Executor.Stream; st.MaxBytes < 256 || st.MaxBytes > protocol.MaxDeltaBytes {
		bad("executor.stream.max_bytes", "must be 256 to %d, got %d", protocol.MaxDeltaBytes, st.MaxBytes)
	}
	if c.Toolhost.Concurrency < 0 {
		bad("toolhost.concurrency", "must not be negative (0 derives it from the machine), got %d", c.Toolhost.Concurrency)
	}
	if c.Toolhost.Queue < -1 {
		bad("toolhost.queue", "must be -1 (no waiting), 0 (as many as concurrency) or more, got %d", c.Toolhost.Queue)
	}
}

// validateToolCalls checks how tool calls run and come back: parallelism, format, retrieval, result cap, timeout.
func (c *Config) validateToolCalls(bad reporter) {
	if c.Tools.MaxParallel < 1 || c.Tools.MaxParallel > 64 {
		bad("tools.max_parallel", "must be between 1 and 64, got %d", c.Tools.MaxParallel)
	}
	switch c.Tools.ResultFormat {
	case "toon", "json", "auto":
	default:
		bad("tools.result_format", "must be toon, json or auto, got %q", c.Tools.ResultFormat)
	}
	if c.Tools.Retrieval.TopK < 1 || c.Tools.Retrieval.TopK > 200 {
		bad("tools.retrieval.top_k", "must be between 1 and 200, got %d", c.Tools.Retrieval.TopK)
	}
	for i, n := range c.Tools.Retrieval.AlwaysInclude {
		if err := protocol.IDTool.Check(n); err != nil {
			bad(fmt.Sprintf("tools.retrieval.always_include[%d]", i), "%v", err)
		}
	}
	if c.Tools.Retrieval.MaxWiden < 0 || c.Tools.Retrieval.MaxWiden > 50 {
		bad("tools.retrieval.max_widen", "must be between 0 and 50, got %d", c.Tools.Retrieval.MaxWiden)
	}
	if c.Tools.MaxResultTokens < 0 || (c.Tools.MaxResultTokens > 0 && c.Tools.MaxResultTokens < 200) {
		bad("tools.max_result_tokens", "must be 0 (no cap) or at least 200, got %d", c.Tools.MaxResultTokens)
	}
	if c.Tools.TimeoutS <= 0 {
		bad("tools.timeout_s", "must be positive, got %v", c.Tools.TimeoutS)
	}
}

// validateGateway checks `gateway:`.
func (c *Config) validateGateway(bad reporter) {
	if c.Gateway.MaxEventStreams < 1 || c.Gateway.MaxEventStreams > 1024 {
		bad("gateway.max_event_streams", "must be between 1 and 1024, got %d", c.Gateway.MaxEventStreams)
	}
	if t := c.Gateway.HTTPToken; t != "" && len(t) < 16 {
		bad("gateway.http_token", "is %d characters; use at least 16 random ones (or leave it out: one is generated under $SKEIN_HOME)", len(t))
	}
}

// validateSandbox checks `tools.sandbox:`.
func (c *Config) validateSandbox(bad reporter) {
	sb := c.Tools.Sandbox
	for key, v := range map[string]int{"cpu_s": sb.CPUSeconds, "address_space_mb": sb.AddressSpaceMB, "open_files": sb.OpenFiles, "processes": sb.Processes, "shm_mb": sb.ShmMB} {
		if v < 0 {
			bad("tools.sandbox."+key, "must not be negative (0 = default), got %d", v)
		}
	}
	switch sb.Cgroup {
	case "", "auto", "off":
	default:
		bad("tools.sandbox.cgroup", "must be auto or off, got %q", sb.Cgroup)
	}
	switch sb.Start {
	case "", "auto", "trampoline":
	default:
		bad("tools.sandbox.start", "must be auto or trampoline, got %q", sb.Start)
	}
	if sb.UIDs != "" {
		if _, _, err := uidrange.Parse(sb.UIDs); err != nil {
			bad("tools.sandbox.uids", "%v", err)
		}
	}
	if sb.RunAs != "" && strings.TrimSpace(sb.RunAs) != sb.RunAs {
		bad("tools.sandbox.run_as", "has surrounding spaces: %q", sb.RunAs)
	}
}

// validateMemory checks how memory learns and what it shares and retrieves.
func (c *Config) validateMemory(bad reporter) {
	if c.Memory.SimilarityThreshold <= 0 || c.Memory.SimilarityThreshold > 1 {
		bad("memory.similarity_threshold", "must be in (0, 1], got %v", c.Memory.SimilarityThreshold)
	}
	if c.Memory.PromotionSessions < 1 {
		bad("memory.promotion_sessions", "must be at least 1, got %d", c.Memory.PromotionSessions)
	}
	if c.Memory.PromotionHelpful < 1 {
		bad("memory.promotion_helpful", "must be at least 1 (recurrence alone does not promote), got %d", c.Memory.PromotionHelpful)
	}
	if c.Memory.FeedbackWindow < 1 || c.Memory.FeedbackWindow > protocol.MaxMarks {
		bad("memory.feedback_window", "must be between 1 and %d, got %d", protocol.MaxMarks, c.Memory.FeedbackWindow)
	}
	if c.Memory.DemoteHarmful < 1 || c.Memory.DemoteHarmful > c.Memory.FeedbackWindow {
		bad("memory.demote_harmful", "must be between 1 and memory.feedback_window (%d), got %d", c.Memory.FeedbackWindow, c.Memory.DemoteHarmful)
	}
	if c.Memory.GuidelineMaxTokens < 5 {
		bad("memory.guideline_max_tokens", "must be at least 5, got %d", c.Memory.GuidelineMaxTokens)
	}
	if c.Memory.Namespace != "" {
		if err := protocol.IDAgent.Check(c.Memory.Namespace); err != nil {
			bad("memory.namespace", "%v", err)
		}
	}
	if c.Memory.ShareMaxFindings < 1 || c.Memory.ShareMaxFindings > protocol.MaxRememberNotes {
		bad("memory.share_max_findings", "must be between 1 and %d, got %d", protocol.MaxRememberNotes, c.Memory.ShareMaxFindings)
	}
	if c.Memory.ShareMaxChars < 20 || c.Memory.ShareMaxChars > 600 {
		bad("memory.share_max_chars", "must be between 20 and 600 (the guideline length cap), got %d", c.Memory.ShareMaxChars)
	}
	if c.Memory.TopK < 0 {
		bad("memory.top_k", "must not be negative, got %d", c.Memory.TopK)
	}
	if c.Memory.Cases.Examples < 0 || c.Memory.Cases.Examples > 2 {
		bad("memory.cases.examples", "must be 0, 1 or 2, got %d", c.Memory.Cases.Examples)
	}
	if b := c.Memory.Cases.ExampleBudget; b < 0 || b > 2000 {
		bad("memory.cases.example_budget", "must be between 0 and 2000 tokens, got %d", b)
	}
	for key, v := range map[string]float64{"memory.cases.min_similarity": c.Memory.Cases.MinSimilarity, "memory.cases.min_quality": c.Memory.Cases.MinQuality,
		"memory.skills.mature_confidence": c.Memory.Skills.MatureConfidence, "memory.skills.retire_confidence": c.Memory.Skills.RetireConfidence,
		"memory.skills.intent_floor": c.Memory.Skills.IntentFloor, "memory.skills.approach_floor": c.Memory.Skills.ApproachFloor} {
		if v < 0 || v > 1 {
			bad(key, "must be in [0, 1], got %v", v)
		}
	}
	if s := c.Memory.Skills; s.RetireConfidence >= s.MatureConfidence && s.MatureConfidence > 0 {
		bad("memory.skills.retire_confidence", "must be below memory.skills.mature_confidence (%v), got %v", s.MatureConfidence, s.RetireConfidence)
	}
	for key, v := range map[string]int{"memory.cases.capacity": c.Memory.Cases.Capacity, "memory.skills.capacity": c.Memory.Skills.Capacity,
		"memory.cases.min_calls": c.Memory.Cases.MinCalls, "memory.skills.min_cases": c.Memory.Skills.MinCases, "memory.skills.mature_cases": c.Memory.Skills.MatureCases} {
		if v < 0 {
			bad(key, "must not be negative, got %d", v)
		}
	}
	if c.Memory.PatternShare < 0 || c.Memory.PatternShare > 1 {
		bad("memory.pattern_share", "must be in [0, 1], got %v", c.Memory.PatternShare)
	}
}

// validateMemoryStore checks where memory is kept and embedded, and its eviction period.
func (c *Config) validateMemoryStore(bad reporter) {
	if c.Memory.Store != "kv" && c.Memory.Store != "milvus" {
		bad("memory.store", "must be kv or milvus, got %q", c.Memory.Store)
	}
	if c.Memory.Store == "milvus" && c.Memory.MilvusAddr == "" {
		bad("memory.milvus_addr", "is required when memory.store is milvus (for example localhost:19530)")
	}
	switch c.Memory.Embedder {
	case "minilm", "ollama", "openai":
	default:
		bad("memory.embedder", "must be minilm, ollama or openai, got %q", c.Memory.Embedder)
	}
	if c.Memory.Embedder == "openai" && c.Memory.EmbedURL != "" && !c.LLM.AllowInsecure {
		if err := CheckKeyTransport(c.Memory.EmbedURL); err != nil {
			bad("memory.embed_url", "%v (set llm.allow_insecure: true to send it anyway)", err)
		}
	}
	if c.Memory.EvictEvery != "" {
		if _, err := time.ParseDuration(c.Memory.EvictEvery); err != nil {
			bad("memory.evict_every", "not a duration (like 1h or 30m): %q", c.Memory.EvictEvery)
		}
	}
}

// validatePlanner checks `planner:`.
func (c *Config) validatePlanner(bad reporter) {
	switch c.Planner.Mode {
	case "off", "auto", "force":
	default:
		bad("planner.mode", "must be off, auto or force, got %q", c.Planner.Mode)
	}
}

// validateMesh checks the mesh's replicas, durations and limits, and namespace.
func (c *Config) validateMesh(bad reporter) {
	if c.Mesh.Replicas != 1 && c.Mesh.Replicas != 3 && c.Mesh.Replicas != 5 {
		bad("mesh.replicas", "must be 1, 3 or 5, got %d", c.Mesh.Replicas)
	}
	durations := map[string]string{"mesh.agent_ttl": c.Mesh.AgentTTL, "mesh.queue_timeout": c.Mesh.QueueTimeout, "mesh.ack_wait": c.Mesh.AckWait, "mesh.limits.session_ttl": c.Mesh.Limits.SessionTTL,
		"mesh.limits.tool_call_ttl": c.Mesh.Limits.ToolCallTTL, "mesh.limits.step_ttl": c.Mesh.Limits.StepTTL, "mesh.limits.dedup_window": c.Mesh.Limits.DedupWindow}
	for name, sl := range c.Mesh.Limits.Streams() {
		key := "mesh.limits." + strings.ToLower(name)
		durations[key+".max_age"] = sl.MaxAge
		if sl.MaxBytes < 0 || sl.MaxMsgs < 0 {
			bad(key, "max_bytes and max_msgs must not be negative (0 keeps the default)")
		}
	}
	for key, v := range durations {
		if v == "" {
			continue
		}
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			bad(key, "not a positive duration (like 45s, 24h or 720h): %q", v)
		}
	}
	if c.Mesh.Limits.BucketMaxBytes < 0 {
		bad("mesh.limits.bucket_max_bytes", "must not be negative (0 keeps the default)")
	}
	if c.Mesh.StorageReserve < 0 {
		bad("mesh.storage_reserve", "must not be negative (0 keeps the default)")
	}
	if c.Mesh.Namespace != "" {
		if err := protocol.IDNamespace.Check(c.Mesh.Namespace); err != nil {
			bad("mesh.namespace", "%v", err)
		}
	}
}

// validateMeshAuth checks the credentials and TLS files.
func (c *Config) validateMeshAuth(bad reporter) {
	if c.Mesh.CredsFile != "" {
		if _, err := os.Stat(c.Mesh.CredsFile); err != nil {
			bad("mesh.creds_file", "file %s does not exist", c.Mesh.CredsFile)
		}
	}
	for key, p := range map[string]string{"mesh.tls.ca": c.Mesh.TLS.CA, "mesh.tls.cert": c.Mesh.TLS.Cert, "mesh.tls.key": c.Mesh.TLS.Key} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			bad(key, "file %s does not exist", p)
		}
	}
	if (c.Mesh.TLS.Cert == "") != (c.Mesh.TLS.Key == "") {
		bad("mesh.tls", "cert and key go together: set both or neither")
	}
}

// inherit fills a role override's empty fields from the default llm, so `planner.llm: {model: x}`
// changes only the model.
func (c *Config) inherit(l *LLM) {
	d := c.LLM
	if l.Provider == "" {
		l.Provider = d.Provider
		if l.APIKeyEnv == "" {
			l.APIKeyEnv = d.APIKeyEnv
		}
		if l.BaseURL == "" {
			l.BaseURL = d.BaseURL
		}
		if l.Script == "" {
			l.Script = d.Script
		}
		l.AllowInsecure = l.AllowInsecure || d.AllowInsecure
	}
	if l.Model == "" {
		l.Model = d.Model
	}
	if l.MaxTokens == 0 {
		l.MaxTokens = d.MaxTokens
	}
	if l.Cache == "" {
		l.Cache = d.Cache
	}
	if l.CacheTTL == "" {
		l.CacheTTL = d.CacheTTL
	}
	if l.ContextBudget == 0 {
		l.ContextBudget = d.ContextBudget
	}
	if l.TimeoutS == 0 {
		l.TimeoutS = d.TimeoutS
	}
	if l.MaxRetries == 0 {
		l.MaxRetries = d.MaxRetries
	}
}

func (c *Config) validateLLM(key string, l *LLM, bad reporter) {
	switch l.Provider {
	case "anthropic", "openai":
	case "scripted":
		if l.Script == "" {
			bad(key+".script", "is required when %s.provider is scripted", key)
		} else if _, err := os.Stat(l.Script); err != nil {
			bad(key+".script", "file %s does not exist", l.Script)
		}
	default:
		bad(key+".provider", "must be anthropic, openai or scripted, got %q", l.Provider)
	}
	if l.Model == "" {
		bad(key+".model", "is required")
	}
	if l.MaxTokens < 1 || l.MaxTokens > 200000 {
		bad(key+".max_tokens", "must be between 1 and 200000, got %d", l.MaxTokens)
	}
	if l.Cache != "auto" && l.Cache != "off" {
		bad(key+".cache", "must be auto or off, got %q", l.Cache)
	}
	if l.CacheTTL != "5m" && l.CacheTTL != "1h" {
		bad(key+".cache_ttl", "must be 5m or 1h, got %q", l.CacheTTL)
	}
	if l.ContextBudget <= 0 || l.ContextBudget > 1 {
		bad(key+".context_budget", "must be in (0, 1], got %v", l.ContextBudget)
	}
	if l.TimeoutS <= 0 {
		bad(key+".timeout_s", "must be positive, got %v", l.TimeoutS)
	}
	if l.Provider != "scripted" && l.BaseURL != "" && !l.AllowInsecure {
		if err := CheckKeyTransport(l.BaseURL); err != nil {
			bad(key+".base_url", "%v (set %s.allow_insecure: true to send it anyway)", err, key)
		}
	}
}

// CheckKeyTransport refuses a model or embedding endpoint that would carry an API key in clear
// text: plain http:// is only for this machine (a local proxy or model server).
func CheckKeyTransport(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("not a URL: %q", rawURL)
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("%s would send the provider key unencrypted over the network; use https://", rawURL)
	default:
		return fmt.Errorf("%q: the scheme must be https:// (or http:// to this machine)", rawURL)
	}
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ForRole returns the model binding a role uses: its override, or the default llm.
func (c *Config) ForRole(role string) LLM {
	var l *LLM
	switch role {
	case protocol.RolePlanner:
		l = c.Planner.LLM
	case protocol.RoleExecutor:
		l = c.Executor.LLM
	case protocol.RoleMiner:
		l = c.Miner.LLM
	}
	if l == nil {
		return c.LLM
	}
	return *l
}

// keyAtLine finds the dotted key whose value sits on line, so a type error names the key the user
// wrote; the YAML decoder reports only the line.
func keyAtLine(data []byte, line int) string {
	var doc yaml.Node
	if yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc) != nil {
		return ""
	}
	var walk func(n *yaml.Node, prefix string) string
	walk = func(n *yaml.Node, prefix string) string {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				if k := walk(c, prefix); k != "" {
					return k
				}
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key, val := n.Content[i], n.Content[i+1]
				if val.Line == line && val.Kind != yaml.MappingNode {
					return prefix + key.Value
				}
				if k := walk(val, prefix+key.Value+"."); k != "" {
					return k
				}
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				if c.Line == line && prefix != "" {
					return prefix[:len(prefix)-1]
				}
				if k := walk(c, prefix); k != "" {
					return k
				}
			}
		}
		return ""
	}
	return walk(&doc, "")
}
