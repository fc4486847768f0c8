package govern

import (
	"context"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/usage"
)

// Scope is what a session's budget checks need: its own budget and its root's (a child's usage
// counts against both), and the tree's deadline, whichever is sooner.
type Scope struct {
	Session, Root   string
	Own, RootBudget protocol.Budget
	Deadline        time.Time
}

// ScopeOf builds the scope of a session from its record and, for a child, its root's record.
func ScopeOf(s protocol.Session, root *protocol.Session) Scope {
	sc := Scope{Session: s.SessionID, Root: s.Root, Deadline: s.Deadline}
	if s.Budget != nil {
		sc.Own = *s.Budget
	}
	if root != nil {
		if root.Budget != nil {
			sc.RootBudget = *root.Budget
		}
		if !root.Deadline.IsZero() && (sc.Deadline.IsZero() || root.Deadline.Before(sc.Deadline)) {
			sc.Deadline = root.Deadline
		}
	}
	return sc
}

// Limited reports whether any budget applies, so the ledger is worth reading and writing.
func (s Scope) Limited() bool { return !s.Own.IsZero() || !s.RootBudget.IsZero() }

// Keys are the ledger entries a charge goes to: the session's own and its root's.
func (s Scope) Keys() []string { return []string{s.Session, s.Root} }

// Budgeted is one ledger entry and the budget checked against what it has spent.
type Budgeted struct {
	Key    string
	Budget protocol.Budget
}

// Budgets are the session's own budget, then its root's: a child's spending counts against both.
func (s Scope) Budgets() []Budgeted {
	out := []Budgeted{{s.Session, s.Own}}
	if s.Root != "" {
		out = append(out, Budgeted{s.Root, s.RootBudget})
	}
	return out
}

// CheckTurn checks the session's and its root's limits before one model call, reading what
// each has spent from the ledger.
func (l *Ledger) CheckTurn(ctx context.Context, s Scope, now time.Time) (*Exceeded, error) {
	for _, b := range s.Budgets() {
		var spent protocol.LedgerEntry
		if !b.Budget.IsZero() {
			var err error
			if spent, err = l.Get(ctx, b.Key); err != nil {
				return nil, err
			}
		}
		if ex := CheckTurn(b.Key, b.Budget, spent, s.Deadline, now); ex != nil {
			return ex, nil
		}
	}
	return nil, nil
}

// ModelDelta is what one model call adds to the ledger: one turn, every token billed as input
// (fresh input, cache writes and cache reads), the output, and the cost when the model has a
// price (known false: it has none, and the model is listed as unpriced).
func ModelDelta(model, cacheTTL string, u protocol.Usage) (d protocol.LedgerEntry, known bool) {
	d = protocol.LedgerEntry{Turns: 1, OutputTokens: u.OutputTokens,
		InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens}
	if usd, ok := usage.Cost(model, u, cacheTTL); ok {
		d.CostUSD = usd
		return d, true
	}
	d.UnpricedModels = []string{model}
	return d, false
}
