// Package config loads agent.yaml over defaults and validates it, naming the key and the file in
// every error.
package config

import (
	"encoding/json"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/usage"
)

// Config is one agent's configuration file.
type Config struct {
	Agent    Agent    `yaml:"agent"`
	LLM      LLM      `yaml:"llm"`
	Tools    Tools    `yaml:"tools"`
	Memory   Memory   `yaml:"memory"`
	Planner  Planner  `yaml:"planner"`
	Executor Executor `yaml:"executor"`
	Toolhost Toolhost `yaml:"toolhost"`
	Miner    Miner    `yaml:"miner"`
	Mesh     Mesh     `yaml:"mesh"`
	// Models adds models to the built-in model table (prices, context window, output limit) or
	// overrides its entries; see pkg/usage/prices.yaml for the fields.
	Models  map[string]usage.Entry `yaml:"models"`
	Gateway Gateway                `yaml:"gateway"`

	// Path is the file this configuration was read from ("" for defaults).
	Path string `yaml:"-"`
}

// Agent is the `agent:` section.
type Agent struct {
	Name string `yaml:"name"`
	// Description is what an agent that lists this one in tools.agents is shown: what it does
	// and when to call it ("" gives a generic line).
	Description string `yaml:"description"`
	// InputSchema is the arguments callers send when this agent is offered as a tool (a JSON
	// Schema as YAML; empty: {"task": string}). The child session's task is the arguments.
	InputSchema map[string]any `yaml:"input_schema"`
	// MaxTurns bounds the model turns (calls) one step may take; the step ends incomplete after.
	MaxTurns int `yaml:"max_turns"`
	// MaxStepsOldName is max_turns under the name it had until this version ("steps" now means
	// only a plan's steps); it is read into MaxTurns, and goes in the next version.
	MaxStepsOldName int      `yaml:"max_steps"`
	SystemPrompt    string   `yaml:"system_prompt"`
	Policies        []string `yaml:"policies"`
	// MaxDepth bounds agent-as-tool recursion.
	MaxDepth int `yaml:"max_depth"`
	// Budget limits every task of this agent (tokens, money, time, turns, tool calls, depth,
	// fan-out); a task's own budget at submit can only tighten it.
	Budget protocol.Budget `yaml:"budget"`
	// Profile is the agent's standing profile (identity and rules, Markdown), a file beside
	// agent.yaml; the executor puts it, with the patches learning applied, in the cached system
	// prefix (pkg/memory/profile). "" means none.
	Profile         string          `yaml:"profile"`
	ProfileLearning ProfileLearning `yaml:"profile_learning"`
}

// ProfileLearning is `agent.profile_learning`: how the miner may patch the profile.
type ProfileLearning struct {
	// Enabled lets the miner propose patches (each needs evidence from MinSessions sessions).
	Enabled bool `yaml:"enabled"`
	// AutoApply applies a patch that passes every gate; otherwise it waits for `skein profile apply`.
	AutoApply   bool `yaml:"auto_apply"`
	MinSessions int  `yaml:"min_sessions"`
	// MaxTokens bounds the whole profile with its applied patches; PatchTokens one patch's rule.
	MaxTokens   int    `yaml:"max_tokens"`
	PatchTokens int    `yaml:"patch_tokens"`
	Section     string `yaml:"section"`
}

// MemoryAgent is the name this agent's memory is kept under: memory.namespace, else agent.name.
func (c *Config) MemoryAgent() string {
	if c.Memory.Namespace != "" {
		return c.Memory.Namespace
	}
	return c.Agent.Name
}

// InputSchemaJSON is agent.input_schema as JSON (nil when none is declared).
func (a Agent) InputSchemaJSON() json.RawMessage {
	if a.InputSchema == nil {
		return nil
	}
	raw, err := json.Marshal(a.InputSchema)
	if err != nil {
		return nil // Validate reported it
	}
	return raw
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
	// Concurrency is how many steps one executor process runs at once; 0 derives it from the
	// machine (8 per CPU, at least 8): a step mostly waits on a model or a tool.
	Concurrency int `yaml:"concurrency"`
	// MaxWaiting bounds the steps that wait for a child agent session without holding one of
	// the Concurrency places (0: 8 × Concurrency).
	MaxWaiting int `yaml:"max_waiting"`
	// Stream publishes the text of model turns on the delta subject as it is generated.
	Stream Stream `yaml:"stream"`
}

// Stream is `executor.stream:`: how model answers stream to readers (pkg/delta).
type Stream struct {
	// Enabled: publish deltas (default true). Off, readers see each turn's text when it ends.
	Enabled bool `yaml:"enabled"`
	// FlushMS is the longest a piece of text waits before it is published (default 50).
	FlushMS int `yaml:"flush_ms"`
	// MaxBytes is the most text one delta message carries (default 4096, at most 16384).
	MaxBytes int `yaml:"max_bytes"`
}

// Toolhost is the `toolhost:` section.
type Toolhost struct {
	// Concurrency bounds the tool processes one toolhost runs at once; 0 derives it from the
	// machine (4 per CPU, at least 8).
	Concurrency int `yaml:"concurrency"`
	// Queue is how many calls may wait for a free slot; a call beyond it is refused at once
	// with kind busy, which callers retry (another toolhost may take it). 0: as many as
	// Concurrency; -1: none wait.
	Queue int `yaml:"queue"`
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
	// AllowInsecure lets base_url be plain http:// to a host other than this machine, which
	// sends the provider key unencrypted; off by default.
	AllowInsecure bool `yaml:"allow_insecure"`
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
	MaxOutput    ByteSize  `yaml:"max_output_bytes"`
	Agents       []string  `yaml:"agents"` // other agents offered as tools
	Retrieval    Retrieval `yaml:"retrieval"`
	// MaxResultTokens caps what one tool result may put in the transcript; a bigger result is
	// stored whole in the object store and the model sees a head-and-tail view and a handle to
	// page through with read_result (0: no cap).
	MaxResultTokens int `yaml:"max_result_tokens"`
	// Sandbox confines every subprocess tool (docs/security.md, "Tools").
	Sandbox ToolSandbox `yaml:"sandbox"`
	// MCP mounts MCP servers by name: each of their tools is served as <name>__<tool>
	// (docs/mcp.md).
	MCP map[string]MCPServer `yaml:"mcp"`
}

// ToolSandbox is `tools.sandbox:`. Limits of 0 take the built-in defaults; a manifest's own
// `sandbox` overrides them per tool.
type ToolSandbox struct {
	CPUSeconds     int    `yaml:"cpu_s"`
	AddressSpaceMB int    `yaml:"address_space_mb"`
	OpenFiles      int    `yaml:"open_files"`
	Processes      int    `yaml:"processes"`
	ShmMB          int    `yaml:"shm_mb"`
	RunAs          string `yaml:"run_as"`      // auto | current | a user name or uid
	UIDs           string `yaml:"uids"`        // first-last: each call's own uid under run_as auto on a root host
	Cgroup         string `yaml:"cgroup"`      // auto | off
	Start          string `yaml:"start"`       // auto | trampoline
	Trampoline     string `yaml:"trampoline"`  // "" = skein-tool-sandbox next to the binary, else the binary itself
	ScratchDir     string `yaml:"scratch_dir"` // "" = the system temp folder
}

// Retrieval is `tools.retrieval:` (retrieved tool descriptions).
type Retrieval struct {
	Enabled       bool     `yaml:"enabled"`
	TopK          int      `yaml:"top_k"`
	AlwaysInclude []string `yaml:"always_include"`
	// MaxWiden bounds how many times one step's tool set may grow (find_tools, or a call to a
	// known tool that was not offered); all additions of one model turn count once.
	MaxWiden int `yaml:"max_widen"`
}

// Memory is the `memory:` section.
type Memory struct {
	Enabled             bool    `yaml:"enabled"`
	TopK                int     `yaml:"top_k"`
	SimilarityThreshold float64 `yaml:"similarity_threshold"`
	PromotionSessions   int     `yaml:"promotion_sessions"`
	// PromotionHelpful is how many helpful marks a guideline needs besides its sessions before
	// it is promoted (at least 1: recurrence alone is not enough).
	PromotionHelpful int `yaml:"promotion_helpful"`
	// FeedbackWindow is how many sessions' feedback marks an entry keeps; DemoteHarmful harmful
	// marks in that window, outnumbering its helpful ones, demote a strategic rule to tactical
	// (and retire a demoted one).
	FeedbackWindow     int     `yaml:"feedback_window"`
	DemoteHarmful      int     `yaml:"demote_harmful"`
	GuidelineMaxTokens int     `yaml:"guideline_max_tokens"`
	TokenBudget        int     `yaml:"token_budget"`
	ToolFloor          float64 `yaml:"tool_floor"`
	PatternShare       float64 `yaml:"pattern_share"`
	Capacity           int     `yaml:"capacity"`
	EvictEvery         string  `yaml:"evict_every"`
	Store              string  `yaml:"store"` // kv | milvus
	MilvusAddr         string  `yaml:"milvus_addr"`
	Embedder           string  `yaml:"embedder"` // minilm | ollama | openai
	EmbedURL           string  `yaml:"embed_url"`
	EmbedModel         string  `yaml:"embed_model"`

	// MilvusConsistency of Milvus searches and lists: session (default), bounded, strong, eventually.
	MilvusConsistency string `yaml:"milvus_consistency"`
	// EmbedCache bounds the vectors kept per (text, model) so repeated texts embed once
	// (0: 4096; negative: no cache).
	EmbedCache int `yaml:"embed_cache"`
	// Namespace is the memory this agent reads and writes (""): its own, under agent.name).
	// Agents that name the same namespace share one memory.
	Namespace string `yaml:"namespace"`
	// SessionTools offers the model remember (store a note for this agent) and recall (search
	// this agent's memory), both through memoryd.
	SessionTools bool `yaml:"session_tools"`
	// ShareWithParent writes this agent's findings (its final answer and its remember notes)
	// into the memory of the agent that called it as a tool, at most ShareMaxFindings of at most
	// ShareMaxChars each.
	ShareWithParent  bool `yaml:"share_with_parent"`
	ShareMaxFindings int  `yaml:"share_max_findings"`
	ShareMaxChars    int  `yaml:"share_max_chars"`
	// ConversationFacts offers the durable facts the user stated in a conversation's turns to
	// this agent's memory (as remember notes, through the lesson gate) when compaction folds
	// those turns; false keeps them in the conversation's summary only.
	ConversationFacts bool `yaml:"conversation_facts"`

	// Cases and Skills are the memory kinds beyond guidelines (docs/memory.md).
	Cases  MemoryCases  `yaml:"cases"`
	Skills MemorySkills `yaml:"skills"`
}

// MemoryCases is `memory.cases:`: distilled episodes, and the worked examples shown from them.
type MemoryCases struct {
	// Enabled: the miner distils each finished session's episodes into cases.
	Enabled bool `yaml:"enabled"`
	// Capacity bounds the cases of one agent (eviction removes the least worth first).
	Capacity int `yaml:"capacity"`
	// MinCalls: an episode with fewer tool calls is trivial and gets no case.
	MinCalls int `yaml:"min_calls"`
	// Examples is how many successful cases like the task an executor shows as worked examples
	// (0: none, at most 2); ExampleBudget bounds their tokens and the skill's together.
	Examples      int `yaml:"examples"`
	ExampleBudget int `yaml:"example_budget"`
	// MinSimilarity and MinQuality: a case is shown only for a task at least this similar, and
	// only when it scored at least this quality and carries an insight (it paid for itself).
	MinSimilarity float64 `yaml:"min_similarity"`
	MinQuality    float64 `yaml:"min_quality"`
}

// MemorySkills is `memory.skills:`: procedures aggregated from similar successful cases.
type MemorySkills struct {
	Enabled  bool `yaml:"enabled"`
	Capacity int  `yaml:"capacity"`
	// MinCases similar successful cases form a skill; MatureCases confirmations and
	// MatureConfidence make it mature; below RetireConfidence it is retired.
	MinCases         int     `yaml:"min_cases"`
	MatureCases      int     `yaml:"mature_cases"`
	MatureConfidence float64 `yaml:"mature_confidence"`
	RetireConfidence float64 `yaml:"retire_confidence"`
	// IntentFloor and ApproachFloor: how similar a case's task (cosine) and tool sequence must
	// be to a skill's, or to the other cases of a cluster.
	IntentFloor   float64 `yaml:"intent_floor"`
	ApproachFloor float64 `yaml:"approach_floor"`
	// Show: executors see the mature skill that fits a task as a short procedure, and planners
	// use it as a plan template.
	Show bool `yaml:"show"`
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
	// CredsFile is this process's NATS credentials (an nkey seed file or a NATS .creds file);
	// empty means $SKEIN_CREDS, then the identity's file under $SKEIN_HOME/creds.
	CredsFile string `yaml:"creds_file"`
	// TLS secures NATS connections (and the embedded server's port).
	TLS TLS `yaml:"tls"`
	// AgentTTL is how long an agent's registration holds without a heartbeat from one of its
	// executors; after it the gateway refuses the agent's tasks (a duration, like 45s).
	AgentTTL string `yaml:"agent_ttl"`
	// QueueTimeout is how long a running session waits after its agent's registration lapsed
	// (no executor serves it any more) before a planner ends it failed (a duration, like 5m).
	QueueTimeout string `yaml:"queue_timeout"`
	// AckWait is how long a message a role is handling may go without an in-progress heartbeat
	// before JetStream delivers it again (a duration; empty: 3s). Every consumer uses it.
	AckWait string `yaml:"ack_wait"`
	// Limits bound every stream and bucket; what is left empty keeps its default.
	Limits MeshLimits `yaml:"limits"`
	// StorageReserve is, for the embedded server, the free space (bytes) of its store's disk
	// under which new sessions are refused (storage_full), so those already accepted have room
	// to finish; 0: 2% of the disk, between 8 MiB and 1 GiB.
	StorageReserve int64 `yaml:"storage_reserve"`
}

// TLS is `mesh.tls:`: CA verifies the server (and, on the embedded server, client
// certificates); Cert and Key are this side's certificate.
type TLS struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// StreamLimits bound one stream. Zero or empty keeps the default of docs/config.md.
type StreamLimits struct {
	MaxAge   string   `yaml:"max_age"`
	MaxBytes ByteSize `yaml:"max_bytes"`
	MaxMsgs  int64    `yaml:"max_msgs"`
}

// MeshLimits is the `mesh.limits:` section: what the operator lets the mesh keep.
type MeshLimits struct {
	Tasks   StreamLimits `yaml:"tasks"`
	Work    StreamLimits `yaml:"work"`
	Results StreamLimits `yaml:"results"`
	Trace   StreamLimits `yaml:"trace"`
	Usage   StreamLimits `yaml:"usage"`
	DLQ     StreamLimits `yaml:"dlq"`
	// BucketMaxBytes bounds each KV bucket and the object store.
	BucketMaxBytes ByteSize `yaml:"bucket_max_bytes"`
	// SessionTTL, ToolCallTTL and StepTTL are how long session records, tool call records and
	// step results are kept (durations).
	SessionTTL  string `yaml:"session_ttl"`
	ToolCallTTL string `yaml:"tool_call_ttl"`
	StepTTL     string `yaml:"step_ttl"`
	// DedupWindow is how long the server remembers message ids to drop duplicates (a duration);
	// the ids of that long are held in memory.
	DedupWindow string `yaml:"dedup_window"`
}

// Streams returns the stream limits by stream base name (TASKS, WORK, ...).
func (l MeshLimits) Streams() map[string]StreamLimits {
	return map[string]StreamLimits{"TASKS": l.Tasks, "WORK": l.Work, "RESULTS": l.Results, "TRACE": l.Trace, "USAGE": l.Usage, "DLQ": l.DLQ}
}

// DefaultAgentTTL is mesh.agent_ttl when unset.
const DefaultAgentTTL = 45 * time.Second

// AgentTTLOrDefault is mesh.agent_ttl as a duration.
func (m Mesh) AgentTTLOrDefault() time.Duration {
	return DurationOr(m.AgentTTL, DefaultAgentTTL)
}

// AckWaitOrZero is mesh.ack_wait as a duration, 0 when unset (the consumer table's default).
func (m Mesh) AckWaitOrZero() time.Duration { return DurationOr(m.AckWait, 0) }

// DefaultQueueTimeout is mesh.queue_timeout when unset.
const DefaultQueueTimeout = 5 * time.Minute

// QueueTimeoutOrDefault is mesh.queue_timeout as a duration.
func (m Mesh) QueueTimeoutOrDefault() time.Duration {
	return DurationOr(m.QueueTimeout, DefaultQueueTimeout)
}

// DurationOr parses s, or returns def when s is empty or invalid (Load has refused invalid ones).
func DurationOr(s string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d
	}
	return def
}

// Gateway is the `gateway:` section (the HTTP API; see docs/security.md).
type Gateway struct {
	// HTTPToken is the API's bearer token; prefer $SKEIN_HTTP_TOKEN or the generated
	// $SKEIN_HOME/http.token, which keep it out of a file people share.
	HTTPToken string `yaml:"http_token"`
	// MaxEventStreams caps the event streams one client (remote IP) may hold open at once.
	MaxEventStreams int `yaml:"max_event_streams"`
}
