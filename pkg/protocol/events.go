package protocol

import (
	"encoding/json"
	"time"
)

// EventType names a trace event.
type EventType string

const (
	EvSessionStarted EventType = "session_started"
	EvPlan           EventType = "plan"
	EvStepStarted    EventType = "step_started"
	EvRetrieval      EventType = "retrieval"
	EvModelCall      EventType = "model_call"
	EvThought        EventType = "thought"
	EvToolCall       EventType = "tool_call"
	EvCompaction     EventType = "compaction"
	EvDecision       EventType = "decision"
	EvStepFinished   EventType = "step_finished"
	EvFinal          EventType = "final"
	EvIncomplete     EventType = "incomplete"
	EvFailed         EventType = "failed"
	EvMined          EventType = "mined" // the miner's ingest actions for the session
	// EvTools records a step's tool set: Attrs["phase"] is "offered" (at the start, with
	// Attrs["ranker"]), "widened" (tools added mid-step, Attrs["by"] says how) or "used".
	EvTools EventType = "tools"
	// EvCancel records who cancelled the session and why (Attrs by, Reason); the session then
	// ends with outcome cancelled.
	EvCancel EventType = "cancel"
	// EvBudget records a budget limit reached (Attrs limit, reached, max); the session then ends
	// with outcome budget_exceeded.
	EvBudget EventType = "budget"
	// EvUsage is always the last event of a session. The planner writes one when the session
	// ends; the miner, after mining the session, writes a final one whose totals include its own
	// model calls (Role miner). The last usage event of a session is the authoritative total.
	EvUsage EventType = "usage"
)

// Terminal reports whether t ends the work of a session (the usage event follows it).
func (t EventType) Terminal() bool { return t == EvFinal || t == EvIncomplete || t == EvFailed }

// Event is one trace event on Names.Trace(session). One flat type keeps the JSONL mirror and
// every reader simple; each event type fills the fields it needs.
type Event struct {
	Header
	SessionID string    `msgpack:"session_id" json:"session_id" id:"session"`
	Type      EventType `msgpack:"type" json:"type"`
	Time      time.Time `msgpack:"time" json:"time"`
	Agent     string    `msgpack:"agent,omitempty" json:"agent,omitempty" id:"agent"`
	StepID    string    `msgpack:"step_id,omitempty" json:"step_id,omitempty" id:"step"`
	Role      string    `msgpack:"role,omitempty" json:"role,omitempty"`
	Source    string    `msgpack:"source,omitempty" json:"source,omitempty"` // process that wrote it

	Task    string     `msgpack:"task,omitempty" json:"task,omitempty"`
	Plan    []PlanStep `msgpack:"plan,omitempty" json:"plan,omitempty"`
	Turn    int        `msgpack:"turn,omitempty" json:"turn,omitempty"`
	Text    string     `msgpack:"text,omitempty" json:"text,omitempty"`
	Outcome Outcome    `msgpack:"outcome,omitempty" json:"outcome,omitempty"`
	Reason  string     `msgpack:"reason,omitempty" json:"reason,omitempty"`

	// Model calls.
	Model      string `msgpack:"model,omitempty" json:"model,omitempty"`
	Provider   string `msgpack:"provider,omitempty" json:"provider,omitempty"`
	StopReason string `msgpack:"stop_reason,omitempty" json:"stop_reason,omitempty"`
	Usage      *Usage `msgpack:"usage,omitempty" json:"usage,omitempty"`
	LatencyMS  int64  `msgpack:"latency_ms,omitempty" json:"latency_ms,omitempty"`

	// Tool calls. Result is always the raw normalized JSON result, whatever format the model saw.
	Tool   string          `msgpack:"tool,omitempty" json:"tool,omitempty"`
	CallID string          `msgpack:"call_id,omitempty" json:"call_id,omitempty" id:"call"`
	Args   json.RawMessage `msgpack:"args,omitempty" json:"args,omitempty"`
	Result *ToolResult     `msgpack:"result,omitempty" json:"result,omitempty"`

	// Tool set events (EvTools): the tool names.
	Tools []string `msgpack:"tools,omitempty" json:"tools,omitempty"`

	// Retrieval: the guidelines injected and their entry ids.
	Guidelines []Guideline `msgpack:"guidelines,omitempty" json:"guidelines,omitempty"`
	// Retrieval: the cases and skills shown (worked examples, procedures); a planning event:
	// the skill its plan follows.
	Recalled []Recalled `msgpack:"recalled,omitempty" json:"recalled,omitempty"`

	// Compaction: tokens saved.
	TokensSaved int64 `msgpack:"tokens_saved,omitempty" json:"tokens_saved,omitempty"`

	// The usage event.
	Report *UsageReport `msgpack:"report,omitempty" json:"report,omitempty"`

	// The mined event: the candidates mined from the session and what memoryd did with them.
	Mined    []Candidate     `msgpack:"mined,omitempty" json:"mined,omitempty"`
	Cases    []CaseCandidate `msgpack:"cases,omitempty" json:"cases,omitempty"`
	Ingested []IngestAction  `msgpack:"ingested,omitempty" json:"ingested,omitempty"`

	// Attrs carries small extra facts (decision names, counts) without a schema change.
	Attrs map[string]string `msgpack:"attrs,omitempty" json:"attrs,omitempty"`
}
