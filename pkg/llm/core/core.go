// Package core holds the model abstraction's types (Request, Response, Backend, options and
// errors) so that the provider backends can use them while package llm, which callers import,
// builds those backends. Package llm re-exports everything here under the same names; callers
// use llm, not core, except code every role links (pkg/service checks model keys with KeyEnv
// and CheckKey): importing llm there would link the provider SDKs into roles that call no model.
package core

import (
	"context"
	"encoding/json"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Role of a message in a conversation.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// BlockType tells which field of a Block is set.
type BlockType string

const (
	BlockText       BlockType = "text"
	BlockToolUse    BlockType = "tool_use"
	BlockToolResult BlockType = "tool_result"
)

// Block is one piece of message content.
type Block struct {
	Type BlockType
	Text string
	// ToolUse is set for BlockToolUse (an assistant's call).
	ToolUse *ToolCall
	// ToolResult is set for BlockToolResult (the answer to a call, in a user message).
	ToolResult *ToolResult
}

// ToolCall is a model's request to run a tool. Args holds the raw arguments as the provider sent
// them; they may be malformed JSON, which the caller must check (see ValidArgs).
type ToolCall struct {
	ID   string
	Name string
	Args json.RawMessage
}

// ValidArgs reports whether the call's arguments are a JSON object.
func (c ToolCall) ValidArgs() bool {
	if !json.Valid(c.Args) {
		return false
	}
	var obj map[string]json.RawMessage
	return json.Unmarshal(c.Args, &obj) == nil
}

// ToolResult answers a ToolCall; Content is what the model reads (TOON or JSON text).
type ToolResult struct {
	CallID  string
	Content string
	IsError bool
}

// Message is one turn of a conversation.
type Message struct {
	Role    Role
	Content []Block
	// Cache asks for a cache breakpoint after this message (providers that support it).
	Cache bool
}

// SystemBlock is one part of the system prompt. Cache marks a breakpoint after it: everything up
// to and including this block is a stable prefix.
type SystemBlock struct {
	Text  string
	Cache bool
}

// ToolDef is a tool offered to the model.
type ToolDef struct {
	Name        string
	Description string
	InputSchema json.RawMessage
}

// Request is one model call.
type Request struct {
	Model     string
	System    []SystemBlock
	Tools     []ToolDef
	Messages  []Message
	MaxTokens int
	// CacheTools asks for a breakpoint after the last tool definition.
	CacheTools bool
	// CacheTTL is "5m" (default) or "1h".
	CacheTTL string
	// Role (planner, executor, miner, subagent) is carried for accounting, never sent.
	Role string
	// Stream, when set, is told the answer's text as the provider generates it, piece by piece
	// and in order, before Complete returns the whole Response (whose Text is those pieces
	// joined). Never sent. It is called on the calling goroutine and must not block for long.
	Stream func(Delta)
}

// Delta is one piece of a streamed answer (Request.Stream).
type Delta struct {
	// Text continues the answer.
	Text string
	// Restart voids the text streamed so far: the model answers again from the start (a reply
	// cut at max_tokens is asked again once with a larger limit). Text is empty then.
	Restart bool
}

// Response is the model's answer.
type Response struct {
	Text       string
	ToolCalls  []ToolCall
	StopReason string
	Model      string
	Usage      protocol.Usage
	Latency    time.Duration
}

// Stop reasons, normalized across providers.
const (
	StopEndTurn   = "end_turn"
	StopToolUse   = "tool_use"
	StopMaxTokens = "max_tokens"
	StopOther     = "other"
)

// Backend is one model provider.
type Backend interface {
	// Complete sends one request and returns the answer. Errors are wrapped with the provider's
	// name; transient errors are retried inside the backend.
	Complete(ctx context.Context, req Request) (*Response, error)
	// Provider names the provider ("anthropic", "openai", "scripted").
	Provider() string
}
