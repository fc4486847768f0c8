// Package llm is the model abstraction: one Backend interface that the executor, planner and
// miner call, and New, which builds the backend an agent.yaml binding names (anthropic, openai,
// scripted; implementations in the sub-packages of the same names).
//
// The types are defined in pkg/llm/core, so that the backends can use them while this package
// builds the backends, and are re-exported here under the same names: a Request here is a
// core.Request. Callers import this package only.
package llm

import "github.com/skein-mesh/skein/pkg/llm/core"

// Role of a message in a conversation.
type Role = core.Role

const (
	RoleUser      = core.RoleUser
	RoleAssistant = core.RoleAssistant
)

// BlockType tells which field of a Block is set.
type BlockType = core.BlockType

const (
	BlockText       = core.BlockText
	BlockToolUse    = core.BlockToolUse
	BlockToolResult = core.BlockToolResult
)

// Block is one piece of message content.
type Block = core.Block

// ToolCall is a model's request to run a tool. Args holds the raw arguments as the provider sent
// them; they may be malformed JSON, which the caller must check (see ToolCall.ValidArgs).
type ToolCall = core.ToolCall

// ToolResult answers a ToolCall; Content is what the model reads (TOON or JSON text).
type ToolResult = core.ToolResult

// Message is one turn of a conversation. Cache asks for a cache breakpoint after it.
type Message = core.Message

// SystemBlock is one part of the system prompt. Cache marks a breakpoint after it: everything up
// to and including this block is a stable prefix.
type SystemBlock = core.SystemBlock

// ToolDef is a tool offered to the model.
type ToolDef = core.ToolDef

// Request is one model call (see core.Request for the fields).
type Request = core.Request

// Response is the model's answer.
type Response = core.Response

// Delta is one piece of a streamed answer (Request.Stream).
type Delta = core.Delta

// Stop reasons, normalized across providers.
const (
	StopEndTurn   = core.StopEndTurn
	StopToolUse   = core.StopToolUse
	StopMaxTokens = core.StopMaxTokens
	StopOther     = core.StopOther
)

// Backend is one model provider: Complete sends one request (errors wrapped with the
// provider's name, transient errors retried inside); Provider names it.
type Backend = core.Backend

// Options tune a backend beyond what agent.yaml says; Option sets one of them.
type (
	Options = core.Options
	Option  = core.Option
)

// Backend options.
var (
	WithLogger      = core.WithLogger
	WithHTTPClient  = core.WithHTTPClient
	WithRetryWait   = core.WithRetryWait
	WithRetryNotify = core.WithRetryNotify
	BuildOptions    = core.BuildOptions
)

// APIError is a failed provider call after the backend's retries.
type APIError = core.APIError

// HTTPStatus returns the HTTP status of a provider error, or 0.
func HTTPStatus(err error) int { return core.HTTPStatus(err) }

// MaxCacheBreakpoints is Anthropic's limit of cache_control markers in one request.
const MaxCacheBreakpoints = core.MaxCacheBreakpoints

// DefaultMinCacheable is the minimum cacheable length assumed for an unknown model.
const DefaultMinCacheable = core.DefaultMinCacheable

// MinCacheableTokens returns the minimum cacheable prompt length of a model, in tokens.
func MinCacheableTokens(model string) int { return core.MinCacheableTokens(model) }
