package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// EvToolAttempt is written by the toolhost for every request of a tool call it receives: a run,
// an answer from the record, a join of a run in flight, or a refusal because the caller's
// deadline had passed. With it the trace shows attempts whose caller died before it could
// write its own tool_call event.
const EvToolAttempt EventType = "tool_attempt"

// Attempt kinds in a tool_attempt event's Attrs["attempt"].
const (
	AttemptRun     = "run"     // the tool was started
	AttemptReplay  = "replay"  // answered from the record of an earlier run
	AttemptJoin    = "join"    // waited for a run of the same id in flight, answered with its result
	AttemptExpired = "expired" // not started: the caller's deadline had passed
)

// RoleToolhost marks the events a toolhost writes.
const RoleToolhost = "toolhost"

// EnvCallID is the environment variable that carries a tool call's id into the tool's process,
// so a tool with real side effects can make them idempotent on its side too.
const EnvCallID = "SKEIN_CALL_ID"

// ToolCallID is the id of the index-th tool call (from 0) of a step's turn (from 1). It depends
// only on where the call sits in the session, never on the model's own call id, so a redelivered
// step asks for the same ids. It is a valid KV key.
func ToolCallID(session, step string, turn, index int) string {
	return fmt.Sprintf("%s.%s.t%d.c%d", session, step, turn, index)
}

// Tool call record states.
const (
	CallRunning = "running"
	CallDone    = "done"
)

// ToolCallRecord is what the toolhost keeps in BucketToolCalls under a call id.
type ToolCallRecord struct {
	Header
	CallID string `msgpack:"call_id" json:"call_id" id:"call"`
	Tool   string `msgpack:"tool" json:"tool" id:"tool"`
	// ArgsHash tells a repeat of the call from a different call that reuses the id (a model
	// that asks for something else on a redelivered step).
	ArgsHash string    `msgpack:"args_hash" json:"args_hash"`
	State    string    `msgpack:"state" json:"state"`
	Host     string    `msgpack:"host" json:"host"`
	Started  time.Time `msgpack:"started" json:"started"`
	// LeaseUntil is when a running record is considered abandoned (its host died): a repeat
	// arriving later runs the call again.
	LeaseUntil time.Time  `msgpack:"lease_until,omitempty" json:"lease_until,omitempty"`
	Reply      *ToolReply `msgpack:"reply,omitempty" json:"reply,omitempty"`
}

// ArgsHash is the hash recorded for a call's tool and arguments.
func ArgsHash(tool string, args json.RawMessage) string {
	sum := sha256.Sum256(append([]byte(tool+"\x00"), args...))
	return hex.EncodeToString(sum[:12])
}

// Idempotent is implemented by requests that know whether sending them twice is harmless. A
// request is retried after a timeout only when it says so (bus.Request): a timed-out request
// may have been served, and its reply lost.
type Idempotent interface {
	Idempotent() bool
}

// Idempotent: a submit with a session id minted by the client makes one session however often
// it is sent; without one, every try makes a new session.
func (r *SubmitRequest) Idempotent() bool { return r.SessionID != "" }

// Memory reads are idempotent, and so are ingest and feedback (counted once per session).
func (r *RetrieveRequest) Idempotent() bool      { return true }
func (r *IngestRequest) Idempotent() bool        { return true }
func (r *FeedbackRequest) Idempotent() bool      { return true }
func (r *MemoryHealthRequest) Idempotent() bool  { return true }
func (r *MemoryInspectRequest) Idempotent() bool { return true }
func (r *MemoryListRequest) Idempotent() bool    { return true }
func (r *MemoryGetRequest) Idempotent() bool     { return true }
func (r *MemoryEmbedRequest) Idempotent() bool   { return true }

// Retiring or evicting an entry twice leaves it as once.
func (r *MemoryRetireRequest) Idempotent() bool { return true }

// Cancelling a session twice cancels it once.
func (r *CancelRequest) Idempotent() bool { return true }
