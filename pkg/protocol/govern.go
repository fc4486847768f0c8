package protocol

import (
	"fmt"
	"time"
)

// Governance of a session tree: cancellation and budgets (see DESIGN "A session is a tree").
// A root session and its child agent sessions share a root id; cancellation and budgets are
// properties of that tree.

// CancelMark records that a session was cancelled, by whom and why. Once set in the session
// record it is never cleared: every role checks it before starting work, so a late message
// cannot resurrect the session.
type CancelMark struct {
	By     string    `msgpack:"by" json:"by"`
	Reason string    `msgpack:"reason,omitempty" json:"reason,omitempty"`
	At     time.Time `msgpack:"at" json:"at"`
}

// CancelReply answers a CancelRequest. A session that had already ended is a no-op: NoOp is
// true and Outcome is how it ended; nothing is changed.
type CancelReply struct {
	Header
	SessionID string  `msgpack:"session_id" json:"session_id" id:"session"`
	Status    string  `msgpack:"status" json:"status"` // cancelling | already_cancelled | already_finished
	Outcome   Outcome `msgpack:"outcome,omitempty" json:"outcome,omitempty"`
	NoOp      bool    `msgpack:"no_op,omitempty" json:"no_op,omitempty"`
	// Children are the child sessions cancelled with it, down the lineage.
	Children []string `msgpack:"children,omitempty" json:"children,omitempty" id:"session"`
	Fault
}

// Cancel reply statuses.
const (
	CancelStatusCancelling       = "cancelling"
	CancelStatusAlreadyCancelled = "already_cancelled"
	CancelStatusAlreadyFinished  = "already_finished"
)

// CancelNotice is broadcast on Names.CancelNotice(session) when a session is cancelled, so every
// process working for it (executors, toolhosts, planners) stops at once.
type CancelNotice struct {
	Header
	SessionID string `msgpack:"session_id" json:"session_id" id:"session"`
	By        string `msgpack:"by" json:"by"`
	Reason    string `msgpack:"reason,omitempty" json:"reason,omitempty"`
}

// Budget limits a session tree. Zero means no limit for that field. A budget comes from the
// agent's agent.yaml (agent.budget) and from the task (submit), and the tighter value wins.
type Budget struct {
	// MaxInputTokens counts everything billed as input: fresh input, cache writes and reads.
	MaxInputTokens  int64   `msgpack:"max_input_tokens,omitempty" json:"max_input_tokens,omitempty" yaml:"max_input_tokens" jsonschema:"minimum=0,maximum=9223372036854775807"`
	MaxOutputTokens int64   `msgpack:"max_output_tokens,omitempty" json:"max_output_tokens,omitempty" yaml:"max_output_tokens" jsonschema:"minimum=0,maximum=9223372036854775807"`
	MaxUSD          float64 `msgpack:"max_usd,omitempty" json:"max_usd,omitempty" yaml:"max_usd" jsonschema:"minimum=0,maximum=1.7976931348623157e308"`
	// DeadlineS is the session's wall-time limit in seconds from submission.
	DeadlineS    float64 `msgpack:"deadline_s,omitempty" json:"deadline_s,omitempty" yaml:"deadline_s" jsonschema:"minimum=0,maximum=1.7976931348623157e308"`
	MaxTurns     int     `msgpack:"max_turns,omitempty" json:"max_turns,omitempty" yaml:"max_turns" jsonschema:"minimum=0,maximum=9223372036854775807"`
	MaxToolCalls int     `msgpack:"max_tool_calls,omitempty" json:"max_tool_calls,omitempty" yaml:"max_tool_calls" jsonschema:"minimum=0,maximum=9223372036854775807"`
	MaxDepth     int     `msgpack:"max_depth,omitempty" json:"max_depth,omitempty" yaml:"max_depth" jsonschema:"minimum=0,maximum=9223372036854775807"`
	MaxFanout    int     `msgpack:"max_fanout,omitempty" json:"max_fanout,omitempty" yaml:"max_fanout" jsonschema:"minimum=0,maximum=9223372036854775807"`
}

// Check refuses a negative limit (0 is none; the contract documents say minimum 0).
func (b *Budget) Check() error {
	if b == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"max_input_tokens", float64(b.MaxInputTokens)}, {"max_output_tokens", float64(b.MaxOutputTokens)}, {"max_usd", b.MaxUSD},
		{"deadline_s", b.DeadlineS}, {"max_turns", float64(b.MaxTurns)}, {"max_tool_calls", float64(b.MaxToolCalls)},
		{"max_depth", float64(b.MaxDepth)}, {"max_fanout", float64(b.MaxFanout)},
	} {
		if f.v < 0 {
			return fmt.Errorf("budget %s is negative (%v); give a limit of 0 or more (0: none)", f.name, f.v)
		}
	}
	return nil
}

// IsZero reports whether b sets no limit.
func (b Budget) IsZero() bool { return b == Budget{} }

// Tighter returns the tighter of b and o, field by field (0 is no limit).
func (b Budget) Tighter(o Budget) Budget {
	minI := func(x, y int64) int64 {
		if x == 0 || (y != 0 && y < x) {
			return y
		}
		return x
	}
	minN := func(x, y int) int { return int(minI(int64(x), int64(y))) }
	minF := func(x, y float64) float64 {
		if x == 0 || (y != 0 && y < x) {
			return y
		}
		return x
	}
	return Budget{
		MaxInputTokens:  minI(b.MaxInputTokens, o.MaxInputTokens),
		MaxOutputTokens: minI(b.MaxOutputTokens, o.MaxOutputTokens),
		MaxUSD:          minF(b.MaxUSD, o.MaxUSD),
		DeadlineS:       minF(b.DeadlineS, o.DeadlineS),
		MaxTurns:        minN(b.MaxTurns, o.MaxTurns),
		MaxToolCalls:    minN(b.MaxToolCalls, o.MaxToolCalls),
		MaxDepth:        minN(b.MaxDepth, o.MaxDepth),
		MaxFanout:       minN(b.MaxFanout, o.MaxFanout),
	}
}

// Budget limit names, as they appear in results, traces and `skein run --budget KEY=VALUE`.
const (
	LimitInputTokens  = "max_input_tokens"
	LimitOutputTokens = "max_output_tokens"
	LimitUSD          = "max_usd"
	LimitDeadline     = "deadline_s"
	LimitTurns        = "max_turns"
	LimitToolCalls    = "max_tool_calls"
	LimitDepth        = "max_depth"
	LimitFanout       = "max_fanout"
)

// BudgetStop says which limit a session tree reached: the limit's key, the figure reached, the
// limit, and the session whose budget it is (the root for tree-wide figures).
type BudgetStop struct {
	Limit   string `msgpack:"limit" json:"limit"`
	Reached string `msgpack:"reached" json:"reached"`
	Max     string `msgpack:"max" json:"max"`
	Scope   string `msgpack:"scope" json:"scope"`
}

// LedgerEntry is what a session tree has spent so far, kept in the ledger KV under the root
// session's id (and under each session's own id for its own limits) and updated with
// compare-and-set, so executors anywhere in the mesh charge the same figures.
type LedgerEntry struct {
	Header
	InputTokens  int64   `msgpack:"input_tokens" json:"input_tokens"` // fresh + cache writes + cache reads
	OutputTokens int64   `msgpack:"output_tokens" json:"output_tokens"`
	CostUSD      float64 `msgpack:"cost_usd" json:"cost_usd"`
	Turns        int     `msgpack:"turns" json:"turns"`
	ToolCalls    int     `msgpack:"tool_calls" json:"tool_calls"`
	Children     int     `msgpack:"children" json:"children"`
	// UnpricedModels are models whose calls could not be priced (max_usd cannot count them).
	UnpricedModels []string `msgpack:"unpriced_models,omitempty" json:"unpriced_models,omitempty"`
	// Exceeded is the first limit of this entry's budget that a session of the tree reached,
	// wherever it ran: every session that checks this entry then stops too (depth and fan-out
	// limits leave no figure of their own to check).
	Exceeded *BudgetStop `msgpack:"exceeded,omitempty" json:"exceeded,omitempty"`
	Updated  time.Time   `msgpack:"updated" json:"updated"`
}
