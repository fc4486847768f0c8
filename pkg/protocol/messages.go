package protocol

import (
	"encoding/json"
	"slices"
	"time"
)

// Outcome is how a step or a session ended.
type Outcome string

const (
	OutcomeSuccess             Outcome = "success"
	OutcomeSuccessWithRecovery Outcome = "success_with_recovery"
	OutcomeIncomplete          Outcome = "incomplete"
	OutcomeIncompleteToolFail  Outcome = "incomplete_with_tool_failure"
	OutcomeFailed              Outcome = "failed"
	OutcomeBudgetExceeded      Outcome = "budget_exceeded"
	OutcomeCancelled           Outcome = "cancelled"
	// OutcomeNotAccomplished: the model finished and reported (through the finish tool) that the
	// task was not accomplished. Its answer says why; it is not a success.
	OutcomeNotAccomplished Outcome = "not_accomplished"
)

// Succeeded reports whether the outcome counts as success (the CLI exits 0 only then).
func (o Outcome) Succeeded() bool {
	return o == OutcomeSuccess || o == OutcomeSuccessWithRecovery
}

// Outcomes lists every outcome, best first: readers that offer a choice of them (the console's
// filter) take it from here.
func Outcomes() []Outcome {
	return []Outcome{OutcomeSuccess, OutcomeSuccessWithRecovery, OutcomeIncomplete, OutcomeIncompleteToolFail,
		OutcomeNotAccomplished, OutcomeFailed, OutcomeBudgetExceeded, OutcomeCancelled}
}

// Valid reports whether o is one of the known outcomes.
func (o Outcome) Valid() bool { return slices.Contains(Outcomes(), o) }

// SessionStatus is the state machine kept in the sessions KV.
type SessionStatus string

const (
	StatusQueued   SessionStatus = "queued"
	StatusPlanning SessionStatus = "planning"
	StatusRunning  SessionStatus = "running"
	StatusDone     SessionStatus = "done"
)

// SessionStatuses lists every session status, in the order a session goes through them.
func SessionStatuses() []SessionStatus {
	return []SessionStatus{StatusQueued, StatusPlanning, StatusRunning, StatusDone}
}

// Role names whose tokens are accounted separately.
const (
	RolePlanner  = "planner"
	RoleExecutor = "executor"
	RoleMiner    = "miner"
	RoleSubagent = "subagent"
	RoleMemory   = "memory"
)

// Limits that keep messages small; larger payloads go to the object store as references.
const (
	MaxTaskBytes    = 64 << 10
	MaxInlineResult = 256 << 10
)

// TaskTextPattern is what a task's text must contain: a character that is not white space as
// Go's unicode.IsSpace has it (the gateway trims the text and refuses an empty one). Documents
// fields tagged `text:"task"` (JSON Schema; unanchored, so one such character anywhere). The
// characters are literal, so every regular expression dialect reads the class alike.
const TaskTextPattern = "[^\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"

// SubmitRequest asks the gateway to start a session.
type SubmitRequest struct {
	Header
	SessionID string `msgpack:"session_id,omitempty" json:"session_id,omitempty" id:"session"`
	// Agent "" is the gateway's default agent (agent.name of its config).
	Agent  string `msgpack:"agent,omitempty" json:"agent,omitempty" id:"agent"`
	Task   string `msgpack:"task" json:"task"`
	Caller string `msgpack:"caller,omitempty" json:"caller,omitempty"`
	// Parent and Depth link a sub-agent session to the session whose tool call started it, so
	// agent-as-tool chains can be bounded.
	Parent string `msgpack:"parent,omitempty" json:"parent,omitempty" id:"session"`
	Depth  int    `msgpack:"depth,omitempty" json:"depth,omitempty"`
	// Budget limits this task; the agent's agent.budget applies too and the tighter value wins.
	Budget *Budget `msgpack:"budget,omitempty" json:"budget,omitempty"`
	// TurnID is the id the client minted for this message before its first try (IDTurn).
	// Sent to a finished session, the message is the next turn of its conversation, whatever
	// its text; sent again with the turn id of the conversation's latest turn, it is a retry
	// of that turn. Without one, a session's own task sent again is that session.
	TurnID string `msgpack:"turn_id,omitempty" json:"turn_id,omitempty" id:"turn"`
	// From forks a conversation: the new session (SessionID, minted by the gateway when empty)
	// continues the transcript of this finished turn, the first turn of a conversation of its
	// own; the conversation From belongs to is not touched.
	From string `msgpack:"from,omitempty" json:"from,omitempty" id:"session"`
}

// SubmitReply answers a SubmitRequest.
type SubmitReply struct {
	Header
	SessionID string `msgpack:"session_id" json:"session_id" id:"session"`
	Duplicate bool   `msgpack:"duplicate,omitempty" json:"duplicate,omitempty"`
	// Fault says why a task is refused: code rejected (the task itself is refused; sending it
	// again will not help), bad_request or too_large (an id is malformed or too long, see ID),
	// transient (the mesh could not take it now; try again) or storage_full (the mesh's store
	// cannot take it now; try again once space is freed).
	Fault
}

// CancelRequest asks the gateway to cancel a session.
type CancelRequest struct {
	Header
	SessionID string `msgpack:"session_id" json:"session_id" id:"session"`
	Reason    string `msgpack:"reason,omitempty" json:"reason,omitempty"`
	// By names who cancels (a user, "http", a parent session); it is written to the trace.
	By string `msgpack:"by,omitempty" json:"by,omitempty"`
}

// Task is what the gateway publishes to TASKS for a planner.
type Task struct {
	Header
	SessionID   string    `msgpack:"session_id" json:"session_id" id:"session"`
	Agent       string    `msgpack:"agent" json:"agent" id:"agent"`
	Task        string    `msgpack:"task" json:"task"`
	SubmittedAt time.Time `msgpack:"submitted_at" json:"submitted_at"`
	Parent      string    `msgpack:"parent,omitempty" json:"parent,omitempty" id:"session"`
	Depth       int       `msgpack:"depth,omitempty" json:"depth,omitempty"`
	// Previous is the conversation turn this task continues ("" for a new conversation).
	Previous string `msgpack:"previous,omitempty" json:"previous,omitempty" id:"session"`
}

// Step is one unit of work a planner publishes to WORK for an executor.
type Step struct {
	Header
	SessionID string `msgpack:"session_id" json:"session_id" id:"session"`
	StepID    string `msgpack:"step_id" json:"step_id" id:"step"`
	Agent     string `msgpack:"agent" json:"agent" id:"agent"`
	// Task is always the session's original task, so a step never loses the user's intent.
	Task string `msgpack:"task" json:"task"`
	// Instruction is this step's part of the plan ("" for a single-step plan).
	Instruction string `msgpack:"instruction,omitempty" json:"instruction,omitempty"`
	// Context carries the results of the steps this one depends on.
	Context []StepOutput `msgpack:"context,omitempty" json:"context,omitempty"`
	Depth   int          `msgpack:"depth,omitempty" json:"depth,omitempty"`
	// Previous is the session whose transcript this step continues (a conversation's turn).
	Previous string `msgpack:"previous,omitempty" json:"previous,omitempty" id:"session"`
}

// StepOutput is a finished step's answer handed to its dependents.
type StepOutput struct {
	StepID string `msgpack:"step_id" json:"step_id" id:"step"`
	Text   string `msgpack:"text" json:"text"`
}

// StepResult is what an executor publishes to RESULTS when a step ends.
type StepResult struct {
	Header
	SessionID string  `msgpack:"session_id" json:"session_id" id:"session"`
	StepID    string  `msgpack:"step_id" json:"step_id" id:"step"`
	Outcome   Outcome `msgpack:"outcome" json:"outcome"`
	FinalText string  `msgpack:"final_text,omitempty" json:"final_text,omitempty"`
	Reason    string  `msgpack:"reason,omitempty" json:"reason,omitempty"`
	Turns     int     `msgpack:"turns" json:"turns"`
	Executor  string  `msgpack:"executor,omitempty" json:"executor,omitempty"`
	Usage     Usage   `msgpack:"usage" json:"usage"`
}

// PlanStep is one entry of a session's plan.
type PlanStep struct {
	StepID      string   `msgpack:"step_id" json:"step_id" id:"step"`
	Instruction string   `msgpack:"instruction,omitempty" json:"instruction,omitempty"`
	DependsOn   []string `msgpack:"depends_on,omitempty" json:"depends_on,omitempty" id:"step"`
	Status      string   `msgpack:"status" json:"status"` // pending, published, done
	Outcome     Outcome  `msgpack:"outcome,omitempty" json:"outcome,omitempty"`
	FinalText   string   `msgpack:"final_text,omitempty" json:"final_text,omitempty"`
}

// Step statuses inside a session's plan.
const (
	StepPending   = "pending"
	StepPublished = "published"
	StepDone      = "done"
)

// Session is the state of one session, kept in the sessions KV so any planner can take it over.
type Session struct {
	Header
	SessionID string        `msgpack:"session_id" json:"session_id" id:"session"`
	Agent     string        `msgpack:"agent" json:"agent" id:"agent"`
	Task      string        `msgpack:"task" json:"task"`
	Status    SessionStatus `msgpack:"status" json:"status"`
	Outcome   Outcome       `msgpack:"outcome,omitempty" json:"outcome,omitempty"`
	FinalText string        `msgpack:"final_text,omitempty" json:"final_text,omitempty"`
	Reason    string        `msgpack:"reason,omitempty" json:"reason,omitempty"`
	Plan      []PlanStep    `msgpack:"plan,omitempty" json:"plan,omitempty"`
	Planner   string        `msgpack:"planner,omitempty" json:"planner,omitempty"`
	Parent    string        `msgpack:"parent,omitempty" json:"parent,omitempty" id:"session"`
	Depth     int           `msgpack:"depth,omitempty" json:"depth,omitempty"`
	// Root is the root session of this session's tree ("" for a root itself).
	Root string `msgpack:"root,omitempty" json:"root,omitempty" id:"session"`
	// Children are the child agent sessions this session started, in order.
	Children []string `msgpack:"children,omitempty" json:"children,omitempty" id:"session"`
	// Cancel is set once the session is cancelled and never cleared.
	Cancel *CancelMark `msgpack:"cancel,omitempty" json:"cancel,omitempty"`
	// Budget is the session's effective budget; Deadline is its absolute end (zero: none),
	// never later than its parent's.
	Budget   *Budget   `msgpack:"budget,omitempty" json:"budget,omitempty"`
	Deadline time.Time `msgpack:"deadline,omitempty" json:"deadline,omitempty"`
	// A conversation is a chain of sessions, one per turn: Conversation is its first session
	// ("" for that first one), Previous the turn this one continues, whose transcript it reads.
	// The first session counts the turns and names the latest.
	Conversation string    `msgpack:"conversation,omitempty" json:"conversation,omitempty" id:"session"`
	Previous     string    `msgpack:"previous,omitempty" json:"previous,omitempty" id:"session"`
	TurnCount    int       `msgpack:"turn_count,omitempty" json:"turn_count,omitempty"`
	LastTurn     string    `msgpack:"last_turn,omitempty" json:"last_turn,omitempty" id:"session"`
	Created      time.Time `msgpack:"created" json:"created"`
	Updated      time.Time `msgpack:"updated" json:"updated"`
	// TurnID is the client's id of the message that started this session (SubmitRequest.TurnID).
	TurnID string `msgpack:"turn_id,omitempty" json:"turn_id,omitempty" id:"turn"`
	// ForkedFrom is the turn a forked conversation's first session continues (also its
	// Previous); "" for every other session.
	ForkedFrom string `msgpack:"forked_from,omitempty" json:"forked_from,omitempty" id:"session"`
}

// Usage counts tokens the way the providers bill them.
type Usage struct {
	InputTokens              int64 `msgpack:"input_tokens" json:"input_tokens"`
	OutputTokens             int64 `msgpack:"output_tokens" json:"output_tokens"`
	CacheCreationInputTokens int64 `msgpack:"cache_creation_input_tokens" json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `msgpack:"cache_read_input_tokens" json:"cache_read_input_tokens"`
}

// Add returns u + o.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:              u.InputTokens + o.InputTokens,
		OutputTokens:             u.OutputTokens + o.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens + o.CacheCreationInputTokens,
		CacheReadInputTokens:     u.CacheReadInputTokens + o.CacheReadInputTokens,
	}
}

// UsageReport is the last event of every session and the message on the usage subject.
type UsageReport struct {
	Usage
	Calls int `msgpack:"calls" json:"calls"`
	// Turns counts the model turns of every step of the session (a turn is one model call and
	// what it asked for; a step is one item of the plan).
	Turns int `msgpack:"turns" json:"turns"`
	// Steps is Turns under its old name, written until the next version so readers of the old
	// field keep working; read TurnCount, which also understands reports written before Turns.
	Steps     int              `msgpack:"steps" json:"steps"`
	WallTimeS float64          `msgpack:"wall_time_s" json:"wall_time_s"`
	CostUSD   *float64         `msgpack:"cost_usd" json:"cost_usd"` // nil: a model's price is unknown
	ByModel   map[string]Usage `msgpack:"by_model,omitempty" json:"by_model,omitempty"`
	ByRole    map[string]Usage `msgpack:"by_role,omitempty" json:"by_role,omitempty"`
	// UnpricedModels lists models whose cost could not be computed.
	UnpricedModels []string `msgpack:"unpriced_models,omitempty" json:"unpriced_models,omitempty"`
}

// TurnCount is the report's model turns, from a report of any version.
func (r UsageReport) TurnCount() int {
	if r.Turns == 0 {
		return r.Steps
	}
	return r.Turns
}

// SetTurns records n model turns under both names (see Steps).
func (r *UsageReport) SetTurns(n int) { r.Turns, r.Steps = n, n }

// ToolSpec is what a model is shown of a tool; toolhost publishes it to the tools KV.
type ToolSpec struct {
	Header
	Name        string          `msgpack:"name" json:"name" id:"tool"`
	Description string          `msgpack:"description" json:"description"`
	InputSchema json.RawMessage `msgpack:"input_schema" json:"input_schema"`
	// Agent is set when the tool is another agent answering on the tool subject.
	Agent string `msgpack:"agent,omitempty" json:"agent,omitempty" id:"agent"`
	// TimeoutS is the tool's own limit (0: the host's tools.timeout_s), so callers wait long enough.
	TimeoutS float64 `msgpack:"timeout_s,omitempty" json:"timeout_s,omitempty"`
	// MCP is set when the tool is a tool of an MCP server a toolhost mounts: the server's name
	// (its key in tools.mcp), and MCPTool the tool's own name on that server.
	MCP     string `msgpack:"mcp,omitempty" json:"mcp,omitempty"`
	MCPTool string `msgpack:"mcp_tool,omitempty" json:"mcp_tool,omitempty"`
}

// Built-in tools answered by the executor itself, never by a toolhost: find_tools widens a
// step's retrieved tool set; read_result pages through a result too big for the transcript,
// stored in the ObjectPayloads store. Manifests may not use these names.
const (
	ToolFindTools  = "find_tools"
	ToolReadResult = "read_result"
	// ToolFinish ends a step, reporting whether the task was accomplished.
	ToolFinish = "finish"
)

// Builtin reports whether name is a built-in tool.
// Built-in memory tools, offered with memory.session_tools (they are not reserved otherwise).
const (
	ToolRemember = "remember"
	ToolRecall   = "recall"
)

func Builtin(name string) bool {
	return name == ToolFindTools || name == ToolReadResult || name == ToolFinish
}

// ToolRequest calls a tool on Names.Tool(name).
type ToolRequest struct {
	Header
	SessionID string          `msgpack:"session_id,omitempty" json:"session_id,omitempty" id:"session"`
	StepID    string          `msgpack:"step_id,omitempty" json:"step_id,omitempty" id:"step"`
	CallID    string          `msgpack:"call_id,omitempty" json:"call_id,omitempty" id:"call"`
	Tool      string          `msgpack:"tool" json:"tool" id:"tool"`
	Args      json.RawMessage `msgpack:"args" json:"args"`
	Depth     int             `msgpack:"depth,omitempty" json:"depth,omitempty"`
	// Agent is the memory of the calling agent (memory.namespace, else its name): a sub-agent
	// that shares its findings writes them there.
	Agent string `msgpack:"agent,omitempty" json:"agent,omitempty" id:"agent"`
	// DeadlineMS is when the caller stops waiting (Unix milliseconds, 0: unknown). A toolhost
	// never starts a call whose deadline has passed: nobody would read its answer.
	DeadlineMS int64 `msgpack:"deadline_ms,omitempty" json:"deadline_ms,omitempty"`
}

// A tool request with the HeaderCallProgress header asks the toolhost that holds the call to say
// so while it does: an empty message with the header (value "running") on the request's reply
// subject every CallProgressEvery, until the reply. A caller that hears nothing for CallSilence
// asks again with the same call id: the host has died (or is cut off), and the toolhost that gets
// the repeat waits for the dead host's lease to lapse, then runs the call.
const (
	HeaderCallProgress = "Skein-Call-Progress"
	CallProgressEvery  = 500 * time.Millisecond
	CallSilence        = 2 * time.Second
)

// ToolResult is the one normalized shape of every tool outcome: {ok, error?, result?, stderr?, truncated?}.
type ToolResult struct {
	OK    bool   `msgpack:"ok" json:"ok"`
	Error string `msgpack:"error,omitempty" json:"error,omitempty"`
	// Code is the failure's code (ToolKindCode of Kind), set by the toolhost that answers.
	Code      Code            `msgpack:"code,omitempty" json:"code,omitempty"`
	Result    json.RawMessage `msgpack:"result,omitempty" json:"result,omitempty"`
	Stderr    string          `msgpack:"stderr,omitempty" json:"stderr,omitempty"`
	Truncated bool            `msgpack:"truncated,omitempty" json:"truncated,omitempty"`
	// Kind classifies a failure: see the ToolErr constants.
	Kind string `msgpack:"kind,omitempty" json:"kind,omitempty"`
}

// Failure kinds of a tool call.
const (
	ToolErrUnknown     = "unknown_tool"
	ToolErrBadArgs     = "invalid_arguments"
	ToolErrStart       = "cannot_start"
	ToolErrTimeout     = "timeout"
	ToolErrMalformed   = "malformed_output"
	ToolErrExit        = "nonzero_exit"
	ToolErrTooLarge    = "output_too_large"
	ToolErrUnavailable = "unavailable"
	// ToolErrBusy: every slot and queue place of the toolhost was taken; nothing was started,
	// so the caller retries (tools.Call does, with backoff).
	ToolErrBusy      = "busy"
	ToolErrToolError = "tool_error" // the tool answered {ok:false}
	// ToolErrCancelled and ToolErrBudget mark calls stopped or never made because the session was
	// cancelled or reached a budget limit: not the tool's fault, so nothing to learn from.
	ToolErrCancelled = "cancelled"
	ToolErrBudget    = "budget_exceeded"
)

// ToolReply answers a ToolRequest.
type ToolReply struct {
	Header
	ToolResult
	LatencyMS int64  `msgpack:"latency_ms" json:"latency_ms"`
	Host      string `msgpack:"host,omitempty" json:"host,omitempty"`
	// Usage is the child session's usage report when the tool is an agent, so its tokens count
	// toward the calling session (role subagent).
	Usage *UsageReport `msgpack:"usage,omitempty" json:"usage,omitempty"`
	// Replayed is set when the answer comes from the record of an earlier run of the same call
	// id, not from running the tool again.
	Replayed bool `msgpack:"replayed,omitempty" json:"replayed,omitempty"`
}

// Polarity of a memory entry.
type Polarity string

const (
	PolarityAvoid   Polarity = "avoid"   // mined from failures
	PolarityPattern Polarity = "pattern" // mined from successes
)

// Tier of a memory entry.
type Tier string

const (
	TierTactical  Tier = "tactical"
	TierStrategic Tier = "strategic"
)

// Guideline is a memory entry as it is handed to a prompt.
type Guideline struct {
	ID       string   `msgpack:"id" json:"id" id:"memory"`
	Text     string   `msgpack:"text" json:"text"`
	Tier     Tier     `msgpack:"tier" json:"tier"`
	Polarity Polarity `msgpack:"polarity" json:"polarity"`
	Tools    []string `msgpack:"tools,omitempty" json:"tools,omitempty"`
	Score    float64  `msgpack:"score" json:"score"`
	// Why says which rule of retrieval chose it (a tool the task names, a success-pattern slot,
	// or rank), so a user can see why a guideline was shown.
	Why string `msgpack:"why,omitempty" json:"why,omitempty"`
	// Source, SourceAgent and SourceSession say where the guideline came from (see
	// MemoryEntry); the prompt shows it.
	Source        string `msgpack:"source,omitempty" json:"source,omitempty"`
	SourceAgent   string `msgpack:"source_agent,omitempty" json:"source_agent,omitempty" id:"agent"`
	SourceSession string `msgpack:"source_session,omitempty" json:"source_session,omitempty" id:"session"`
}

// RetrieveRequest asks memoryd for the guidelines that fit a task.
type RetrieveRequest struct {
	Header
	Agent     string   `msgpack:"agent" json:"agent" id:"agent"`
	Task      string   `msgpack:"task" json:"task"`
	Tools     []string `msgpack:"tools,omitempty" json:"tools,omitempty" id:"tool"`
	TopK      int      `msgpack:"top_k,omitempty" json:"top_k,omitempty"`
	SessionID string   `msgpack:"session_id,omitempty" json:"session_id,omitempty" id:"session"`
	// Cases is how many worked examples (successful cases like the task) to return at most, and
	// Skills how many mature skills; 0 asks for none. ExampleBudget bounds the tokens of both
	// as the prompt renders them (0: memoryd's memory.example_budget).
	Cases         int `msgpack:"cases,omitempty" json:"cases,omitempty"`
	Skills        int `msgpack:"skills,omitempty" json:"skills,omitempty"`
	ExampleBudget int `msgpack:"example_budget,omitempty" json:"example_budget,omitempty"`
}

// RetrieveReply carries guidelines, strategic first, and the cases and skills asked for.
type RetrieveReply struct {
	Header
	Guidelines []Guideline `msgpack:"guidelines" json:"guidelines"`
	Cases      []Recalled  `msgpack:"cases,omitempty" json:"cases,omitempty"`
	Skills     []Recalled  `msgpack:"skills,omitempty" json:"skills,omitempty"`
	Fault
}

// Recalled is a case or a skill chosen for a task: the prompt shows a case as a worked example
// and a skill as a short procedure, both fenced as reference data.
type Recalled struct {
	ID    string   `msgpack:"id" json:"id" id:"memory"`
	Kind  string   `msgpack:"kind" json:"kind"`
	Tools []string `msgpack:"tools,omitempty" json:"tools,omitempty"`
	Score float64  `msgpack:"score" json:"score"`
	Why   string   `msgpack:"why,omitempty" json:"why,omitempty"`
	// Tokens is what it costs in the prompt.
	Tokens        int        `msgpack:"tokens,omitempty" json:"tokens,omitempty"`
	Source        string     `msgpack:"source,omitempty" json:"source,omitempty"`
	SourceAgent   string     `msgpack:"source_agent,omitempty" json:"source_agent,omitempty" id:"agent"`
	SourceSession string     `msgpack:"source_session,omitempty" json:"source_session,omitempty" id:"session"`
	Case          *CaseBody  `msgpack:"case,omitempty" json:"case,omitempty"`
	Skill         *SkillBody `msgpack:"skill,omitempty" json:"skill,omitempty"`
}

// CaseCandidate is one distilled episode offered to memoryd.
type CaseCandidate struct {
	// Key identifies the episode within its session, so re-mining is idempotent.
	Key   string   `msgpack:"key" json:"key"`
	Tools []string `msgpack:"tools,omitempty" json:"tools,omitempty"`
	// Sessions are the sessions the episode spans, oldest first (a conversation's turns), when
	// more than the request's own.
	Sessions    []string `msgpack:"sessions,omitempty" json:"sessions,omitempty" id:"session"`
	Source      string   `msgpack:"source,omitempty" json:"source,omitempty"`
	SourceAgent string   `msgpack:"source_agent,omitempty" json:"source_agent,omitempty" id:"agent"`
	Case        CaseBody `msgpack:"case" json:"case"`
}

// Candidate is one mined guideline offered to memoryd.
type Candidate struct {
	Text     string   `msgpack:"text" json:"text"`
	Polarity Polarity `msgpack:"polarity" json:"polarity"`
	Tools    []string `msgpack:"tools,omitempty" json:"tools,omitempty"`
	// Key identifies the candidate within its session (for example the tool and error kind), so
	// re-mining a session is idempotent.
	Key    string `msgpack:"key" json:"key"`
	Source string `msgpack:"source,omitempty" json:"source,omitempty"`
	// SourceAgent is the sub-agent a subagent candidate came from.
	SourceAgent string `msgpack:"source_agent,omitempty" json:"source_agent,omitempty" id:"agent"`
}

// IngestRequest hands memoryd the candidates mined from one session.
type IngestRequest struct {
	Header
	Agent      string      `msgpack:"agent" json:"agent" id:"agent"`
	SessionID  string      `msgpack:"session_id" json:"session_id" id:"session"`
	Candidates []Candidate `msgpack:"candidates" json:"candidates"`
	// Cases are the session's distilled episodes (at most MaxCasesPerRequest).
	Cases []CaseCandidate `msgpack:"cases,omitempty" json:"cases,omitempty"`
	// Scope is the tools the session offered or called, Seen the hosts and mail domains its task
	// and tool arguments named: what the lesson gate lets a lesson of this session speak of
	// (nil: unknown, and that check is skipped).
	Scope []string `msgpack:"scope,omitempty" json:"scope,omitempty"`
	Seen  []string `msgpack:"seen,omitempty" json:"seen,omitempty"`
}

// IngestReply reports what memoryd did with each candidate.
type IngestReply struct {
	Header
	Actions []IngestAction `msgpack:"actions" json:"actions"`
	Fault
}

// IngestAction is what happened to one candidate (added, merged, promoted, superseded, skipped).
type IngestAction struct {
	Key     string `msgpack:"key" json:"key"`
	EntryID string `msgpack:"entry_id" json:"entry_id" id:"memory"`
	Action  string `msgpack:"action" json:"action"`
	Detail  string `msgpack:"detail,omitempty" json:"detail,omitempty"`
}

// FeedbackRequest marks retrieved entries helpful or harmful after a session.
type FeedbackRequest struct {
	Header
	Agent     string   `msgpack:"agent" json:"agent" id:"agent"`
	SessionID string   `msgpack:"session_id" json:"session_id" id:"session"`
	Helpful   []string `msgpack:"helpful,omitempty" json:"helpful,omitempty" id:"memory"`
	Harmful   []string `msgpack:"harmful,omitempty" json:"harmful,omitempty" id:"memory"`
	// Followed lists entries the session plainly followed (a stronger signal).
	Followed []string `msgpack:"followed,omitempty" json:"followed,omitempty" id:"memory"`
	// Echo lists entries retrieved and followed in a session that succeeded, Fizzle entries
	// retrieved and ignored, or followed into a failure: they move the entries' utility.
	Echo   []string `msgpack:"echo,omitempty" json:"echo,omitempty" id:"memory"`
	Fizzle []string `msgpack:"fizzle,omitempty" json:"fizzle,omitempty" id:"memory"`
}

// Ack is the generic reply of operations that return nothing else.
type Ack struct {
	Header
	OK bool `msgpack:"ok" json:"ok"`
	Fault
}

// AgentSpec is what the agents KV holds about an agent: enough for the gateway to accept its
// tasks and for planners to plan them. Executors serving the agent write it at start.
type AgentSpec struct {
	Header
	Name string `msgpack:"name" json:"name" id:"agent"`
	// Description and InputSchema are the agent's declaration as a tool: what callers are shown
	// and what they send (agent.description, agent.input_schema; empty: a generic line and
	// {"task": string}).
	Description string          `msgpack:"description,omitempty" json:"description,omitempty"`
	InputSchema json.RawMessage `msgpack:"input_schema,omitempty" json:"input_schema,omitempty"`
	// Share, when set, has the agent's findings written to the memory of the agent that called
	// it as a tool (memory.share_with_parent).
	Share       *ShareSpec `msgpack:"share,omitempty" json:"share,omitempty"`
	MaxSteps    int        `msgpack:"max_steps" json:"max_steps"`
	MaxDepth    int        `msgpack:"max_depth" json:"max_depth"`
	PlannerMode string     `msgpack:"planner_mode" json:"planner_mode"`
	MaxItems    int        `msgpack:"max_items" json:"max_items"`
	Tools       []string   `msgpack:"tools,omitempty" json:"tools,omitempty" id:"tool"`
	// Budget is the agent's agent.budget, applied to every task the agent runs.
	Budget  *Budget   `msgpack:"budget,omitempty" json:"budget,omitempty"`
	Updated time.Time `msgpack:"updated" json:"updated"`
	// Expires is when the registration lapses unless an executor of the agent heartbeats it
	// again (zero: written by an executor that does not heartbeat; it never lapses).
	Expires time.Time `msgpack:"expires,omitempty" json:"expires,omitempty"`
	// Executor names the process that wrote the registration last.
	Executor string `msgpack:"executor,omitempty" json:"executor,omitempty"`
}

// ShareSpec bounds what a sub-agent shares with its parent's memory when its session ends: its
// final answer and its remember notes, at most MaxFindings of at most MaxChars each.
type ShareSpec struct {
	MaxFindings int `msgpack:"max_findings" json:"max_findings"`
	MaxChars    int `msgpack:"max_chars" json:"max_chars"`
}

// Lapsed reports whether the registration has expired at now: no executor serves the agent.
func (a AgentSpec) Lapsed(now time.Time) bool { return !a.Expires.IsZero() && now.After(a.Expires) }
