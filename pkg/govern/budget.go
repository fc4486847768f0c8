package govern

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Exceeded says which limit a session tree reached and the figure it reached.
type Exceeded struct {
	Limit   string // one of protocol.Limit*
	Reached string
	Max     string
	// Scope is the session whose budget was reached (the root for tree-wide figures).
	Scope string
}

// Stop is the record of e kept in the ledger.
func (e *Exceeded) Stop() *protocol.BudgetStop {
	return &protocol.BudgetStop{Limit: e.Limit, Reached: e.Reached, Max: e.Max, Scope: e.Scope}
}

func (e *Exceeded) Error() string {
	return fmt.Sprintf("budget %s reached: %s of %s (session %s)", e.Limit, e.Reached, e.Max, e.Scope)
}

// Check compares what scope has spent with its budget, before one more model call (tool false)
// or tool call (tool true): a limit is reached when the next call would go past it, so a
// session overshoots a token or money limit by at most the one call that crossed it.
func Check(scope string, b protocol.Budget, spent protocol.LedgerEntry, deadline, now time.Time) *Exceeded {
	ex := func(limit string, reached, maxv any) *Exceeded {
		return &Exceeded{Limit: limit, Reached: fmt.Sprint(reached), Max: fmt.Sprint(maxv), Scope: scope}
	}
	if spent.Exceeded != nil {
		// A session elsewhere in the tree reached this budget's limit: the whole tree stops.
		st := spent.Exceeded
		return &Exceeded{Limit: st.Limit, Reached: st.Reached, Max: st.Max, Scope: st.Scope}
	}
	switch {
	case !deadline.IsZero() && !now.Before(deadline):
		return &Exceeded{Limit: protocol.LimitDeadline, Reached: "deadline " + deadline.UTC().Format(time.RFC3339),
			Max: strconv.FormatFloat(b.DeadlineS, 'f', -1, 64) + "s", Scope: scope}
	case b.MaxInputTokens > 0 && spent.InputTokens >= b.MaxInputTokens:
		return ex(protocol.LimitInputTokens, spent.InputTokens, b.MaxInputTokens)
	case b.MaxOutputTokens > 0 && spent.OutputTokens >= b.MaxOutputTokens:
		return ex(protocol.LimitOutputTokens, spent.OutputTokens, b.MaxOutputTokens)
	case b.MaxUSD > 0 && spent.CostUSD >= b.MaxUSD:
		return ex(protocol.LimitUSD, fmt.Sprintf("%.6f", spent.CostUSD), b.MaxUSD)
	}
	return nil
}

// CheckTurn is Check plus the turn limit, before a model call.
func CheckTurn(scope string, b protocol.Budget, spent protocol.LedgerEntry, deadline, now time.Time) *Exceeded {
	if e := Check(scope, b, spent, deadline, now); e != nil {
		return e
	}
	if b.MaxTurns > 0 && spent.Turns >= b.MaxTurns {
		return &Exceeded{Limit: protocol.LimitTurns, Reached: strconv.Itoa(spent.Turns), Max: strconv.Itoa(b.MaxTurns), Scope: scope}
	}
	return nil
}

// CheckTool is Check plus the tool-call limit, and for an agent called as a tool the depth and
// fan-out limits, before a tool call. depth is the depth the child session would have.
func CheckTool(scope string, b protocol.Budget, spent protocol.LedgerEntry, deadline, now time.Time, agent bool, depth int) *Exceeded {
	if e := Check(scope, b, spent, deadline, now); e != nil {
		return e
	}
	if b.MaxToolCalls > 0 && spent.ToolCalls >= b.MaxToolCalls {
		return &Exceeded{Limit: protocol.LimitToolCalls, Reached: strconv.Itoa(spent.ToolCalls), Max: strconv.Itoa(b.MaxToolCalls), Scope: scope}
	}
	if agent && b.MaxDepth > 0 && depth > b.MaxDepth {
		return &Exceeded{Limit: protocol.LimitDepth, Reached: strconv.Itoa(depth), Max: strconv.Itoa(b.MaxDepth), Scope: scope}
	}
	if agent && b.MaxFanout > 0 && spent.Children >= b.MaxFanout {
		return &Exceeded{Limit: protocol.LimitFanout, Reached: strconv.Itoa(spent.Children), Max: strconv.Itoa(b.MaxFanout), Scope: scope}
	}
	return nil
}

// ParseBudget reads KEY=VALUE settings (`skein run --budget max_usd=0.5`) into a budget.
func ParseBudget(kvs []string) (protocol.Budget, error) {
	var b protocol.Budget
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return b, fmt.Errorf("budget %q: want KEY=VALUE, e.g. max_usd=0.50", kv)
		}
		if err := SetBudget(&b, k, v); err != nil {
			return b, err
		}
	}
	return b, nil
}

// SetBudget sets one budget field by its name.
func SetBudget(b *protocol.Budget, key, val string) error {
	i64 := func(dst *int64) error {
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("budget %s=%q: want a whole number >= 0", key, val)
		}
		*dst = n
		return nil
	}
	in := func(dst *int) error {
		var n int64
		if err := i64(&n); err != nil {
			return err
		}
		*dst = int(n)
		return nil
	}
	fl := func(dst *float64) error {
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || f < 0 {
			return fmt.Errorf("budget %s=%q: want a number >= 0", key, val)
		}
		*dst = f
		return nil
	}
	switch key {
	case protocol.LimitInputTokens:
		return i64(&b.MaxInputTokens)
	case protocol.LimitOutputTokens:
		return i64(&b.MaxOutputTokens)
	case protocol.LimitUSD:
		return fl(&b.MaxUSD)
	case protocol.LimitDeadline:
		return fl(&b.DeadlineS)
	case protocol.LimitTurns:
		return in(&b.MaxTurns)
	case protocol.LimitToolCalls:
		return in(&b.MaxToolCalls)
	case protocol.LimitDepth:
		return in(&b.MaxDepth)
	case protocol.LimitFanout:
		return in(&b.MaxFanout)
	}
	return fmt.Errorf("budget key %q: want one of %s", key, strings.Join(Limits(), ", "))
}

// Limits are the budget keys.
func Limits() []string {
	return []string{protocol.LimitInputTokens, protocol.LimitOutputTokens, protocol.LimitUSD, protocol.LimitDeadline,
		protocol.LimitTurns, protocol.LimitToolCalls, protocol.LimitDepth, protocol.LimitFanout}
}

// Validate checks a budget read from a file or a request.
func Validate(b protocol.Budget) error {
	if b.MaxInputTokens < 0 || b.MaxOutputTokens < 0 || b.MaxUSD < 0 || b.DeadlineS < 0 || b.MaxTurns < 0 ||
		b.MaxToolCalls < 0 || b.MaxDepth < 0 || b.MaxFanout < 0 {
		return fmt.Errorf("budget limits must be >= 0 (0 means no limit)")
	}
	return nil
}
