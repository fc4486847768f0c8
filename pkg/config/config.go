// Package config loads agent.yaml over defaults and validates it, naming the key and the file in
// every error.
package config

// Config is one agent's configuration file.
type Config struct {
	Agent    Agent    `yaml:"agent"`
	LLM      LLM      `yaml:"llm"`
	Tools    Tools    `yaml:"tools"`
	Memory   Memory   `yaml:"memory"`
	Planner  Planner  `yaml:"planner"`
	Executor Executor `yaml:"executor"`
	Miner    Miner    `yaml:"miner"`
	Mesh     Mesh     `yaml:"mesh"`

	// Path is the file this configuration was read from ("" for defaults).
	Path string `yaml:"-"`
}

// Agent is the `agent:` section.
type Agent struct {
	Name         string   `yaml:"name"`
	MaxSteps     int      `yaml:"max_steps"`
	SystemPrompt string   `yaml:"system_prompt"`
	Policies     []string `yaml:"policies"`
	// MaxDepth bounds agent-as-tool recursion.
	MaxDepth int `yaml:"max_depth"`
}

// Planner is the `planner:` section. LLM, when set, overrides the top-level llm for planning
// (a cheap model plans well enough).
type Planner struct {
	Mode     string `yaml:"mode"` // off | auto | force
	MaxItems int    `yaml:"max_items"`
	LLM      *LLM   `yaml:"llm"`
}

// Executor is the `executor:` section.
type Executor struct {
	LLM *LLM `yaml:"llm"`
}

// LLM is a model binding: the top-level `llm:` and the per-role overrides.
type LLM struct {
	Provider  string `yaml:"provider"` // anthropic | openai | scripted
	Model     string `yaml:"model"`
	MaxTokens int    `yaml:"max_tokens"`
	BaseURL   string `yaml:"base_url"`
	APIKeyEnv string `yaml:"api_key_env"`
	// Script is the scripted model's rule file (provider scripted).
	Script string `yaml:"script"`
	// Cache is auto | off (Anthropic prompt caching); CacheTTL is 5m | 1h.
	Cache    string `yaml:"cache"`
	CacheTTL string `yaml:"cache_ttl"`
	// ContextBudget is the share of the model's context window a transcript may fill before the
	// executor compacts it (0 < x <= 1).
	ContextBudget float64 `yaml:"context_budget"`
	// ContextWindow overrides the model's known window, in tokens.
	ContextWindow int `yaml:"context_window"`
	// TimeoutS is the hard deadline of one call.
	TimeoutS float64 `yaml:"timeout_s"`
	// MaxRetries bounds retries of transient errors.
	MaxRetries int `yaml:"max_retries"`
}

// Tools is the `tools:` section.
type Tools struct {
	ManifestDirs []string `yaml:"manifest_dirs"`
	// Enabled is an allow-list of tool names the agent may use; empty means every tool found in
	// ManifestDirs (never anything test-only, which lives outside them).
	Enabled      []string  `yaml:"enabled"`
	MaxParallel  int       `yaml:"max_parallel"`
	ResultFormat string    `yaml:"result_format"` // toon | json
	TimeoutS     float64   `yaml:"timeout_s"`
	MaxOutput    int       `yaml:"max_output_bytes"`
	Agents       []string  `yaml:"agents"` // other agents offered as tools
	Retrieval    Retrieval `yaml:"retrieval"`
}

// Retrieval is `tools.retrieval:` (retrieved tool descriptions).
type Retrieval struct {
	Enabled       bool     `yaml:"enabled"`
	TopK          int      `yaml:"top_k"`
	AlwaysInclude []string `yaml:"always_include"`
}

// Memory is the `memory:` section.
type Memory struct {
	Enabled             bool    `yaml:"enabled"`
	TopK                int     `yaml:"top_k"`
	SimilarityThreshold float64 `yaml:"similarity_threshold"`
	PromotionSessions   int     `yaml:"promotion_sessions"`
	GuidelineMaxTokens  int     `yaml:"guideline_max_tokens"`
	TokenBudget         int     `yaml:"token_budget"`
	ToolFloor           float64 `yaml:"tool_floor"`
	PatternShare        float64 `yaml:"pattern_share"`
	Capacity            int     `yaml:"capacity"`
	EvictEvery          string  `yaml:"evict_every"`
	Store               string  `yaml:"store"` // kv | milvus
	MilvusAddr          string  `yaml:"milvus_addr"`
	Embedder            string  `yaml:"embedder"` // minilm | ollama | openai
	EmbedURL            string  `yaml:"embed_url"`
	EmbedModel          string  `yaml:"embed_model"`

	// MilvusConsistency of Milvus searches and lists: session (default), bounded, strong, eventually.
	MilvusConsistency string `yaml:"milvus_consistency"`
	// EmbedCache bounds the vectors kept per (text, model) so repeated texts embed once
	// (0: 4096; negative: no cache).
	EmbedCache int `yaml:"embed_cache"`
}

// Miner is the `miner:` section.
type Miner struct {
	Enabled bool `yaml:"enabled"`
	LLM     *LLM `yaml:"llm"`
}

// Mesh is the `mesh:` section: where the services find NATS and their state.
type Mesh struct {
	Namespace string `yaml:"namespace"`
	NATSURL   string `yaml:"nats_url"`
	// Replicas of every stream and bucket: 1 on one server, 3 on a 3-node cluster.
	Replicas int `yaml:"replicas"`
}
