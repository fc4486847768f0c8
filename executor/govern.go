package executor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
)

// guard applies a session tree's cancellation and budget to one step: the step's context ends
// on a cancel notice or at the session's deadline, and every model and tool call is checked
// against the ledger first and charged to the session and its root after.
type guard struct {
	e       *Executor
	step    protocol.Step
	session string
	root    string
	own     protocol.Budget
	rootB   protocol.Budget
	// deadline is the session's absolute end (zero: none).
	deadline time.Time
	// cancelled is the mark found in the session record before the step started.
	cancelled *govern.CancelledError
	release   func()

	mu       sync.Mutex
	exceeded *govern.Exceeded // a tool call refused for budget
	turns    int
	calls    map[string]int
	unpriced bool
	reported bool
}

// governStep reads the session's record (and its root's) and returns the step's context.
func (e *Executor) governStep(ctx context.Context, step protocol.Step) (context.Context, *guard) {
	g := &guard{e: e, step: step, session: step.SessionID, calls: map[string]int{}}
	ctx, g.release = e.watch.Track(ctx, step.SessionID)
	if sess, ok := e.sessionRecord(ctx, step.SessionID); ok {
		g.cancelled = govern.FromMark(step.SessionID, sess.Cancel)
		g.root, g.deadline = sess.Root, sess.Deadline
		if sess.Budget != nil {
			g.own = *sess.Budget
		}
		if g.root != "" {
			if rs, ok := e.sessionRecord(ctx, g.root); ok {
				if rs.Budget != nil {
					g.rootB = *rs.Budget
				}
				if !rs.Deadline.IsZero() && (g.deadline.IsZero() || rs.Deadline.Before(g.deadline)) {
					g.deadline = rs.Deadline
				}
			}
		}
	}
	if !g.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, g.deadline, g.deadlineExceeded())
		rel := g.release
		g.release = func() { cancel(); rel() }
	}
	return ctx, g
}

func (e *Executor) sessionRecord(ctx context.Context, id string) (protocol.Session, bool) {
	s, err := e.sessions.Get(ctx, id)
	if err != nil {
		if !errors.Is(err, session.ErrNotFound) && !errors.Is(err, session.ErrUnreadable) {
			e.d.Logger.Warn("read session record", "session", id, "err", err)
		}
		return s, false
	}
	return s, true
}

func (g *guard) deadlineExceeded() *govern.Exceeded {
	b := g.own
	if g.root != "" && g.rootB.DeadlineS > 0 && (b.DeadlineS == 0 || g.rootB.DeadlineS < b.DeadlineS) {
		b = g.rootB
	}
	return govern.Check(g.session, b, protocol.LedgerEntry{}, g.deadline, g.deadline)
}

// limited reports whether any budget applies to the step's tree, so the ledger is worth reading.
func (g *guard) limited() bool {
	return !g.own.IsZero() || !g.rootB.IsZero()
}

// keys are the ledger entries a charge goes to: the session's own and its root's.
func (g *guard) keys() []string { return []string{g.session, g.root} }

// halt reports whether the step must stop before its next model call, and with what outcome.
func (g *guard) halt(ctx context.Context) (protocol.Outcome, string, bool) {
	if g.cancelled != nil {
		return protocol.OutcomeCancelled, g.cancelled.Error(), true
	}
	if ce, ok := govern.AsCancelled(ctx); ok {
		return protocol.OutcomeCancelled, ce.Error(), true
	}
	var ex *govern.Exceeded
	if errors.As(context.Cause(ctx), &ex) {
		return g.stopFor(ex)
	}
	g.mu.Lock()
	ex = g.exceeded
	g.mu.Unlock()
	if ex != nil {
		return g.stopFor(ex)
	}
	if ex := g.check(ctx, func(scope string, b protocol.Budget, spent protocol.LedgerEntry) *govern.Exceeded {
		return govern.CheckTurn(scope, b, spent, g.deadline, time.Now())
	}); ex != nil {
		return g.stopFor(ex)
	}
	return "", "", false
}

// check runs fn against the session's own budget and spending, then the root's.
func (g *guard) check(ctx context.Context, fn func(string, protocol.Budget, protocol.LedgerEntry) *govern.Exceeded) *govern.Exceeded {
	if !g.limited() && g.deadline.IsZero() {
		return nil
	}
	scope := govern.Scope{Session: g.session, Root: g.root, Own: g.own, RootBudget: g.rootB}
	for _, b := range scope.Budgets() {
		var spent protocol.LedgerEntry
		if !b.Budget.IsZero() && g.e.ledger != nil {
			var err error
			if spent, err = g.e.ledger.Get(ctx, b.Key); err != nil {
				g.e.d.Logger.Warn("read budget ledger", "session", b.Key, "err", err)
			}
		}
		if ex := fn(b.Key, b.Budget, spent); ex != nil {
			return ex
		}
	}
	return nil
}

// stopFor is the outcome and reason of a budget limit reached: which limit, the figure reached,
// and what the step did until then.
func (g *guard) stopFor(ex *govern.Exceeded) (protocol.Outcome, string, bool) {
	done := g.done()
	g.mu.Lock()
	first := !g.reported
	g.reported = true
	g.mu.Unlock()
	if first {
		g.e.emit(g.step, protocol.Event{Type: protocol.EvBudget, Role: protocol.RoleExecutor, Reason: ex.Error(),
			Attrs: map[string]string{"limit": ex.Limit, "reached": ex.Reached, "max": ex.Max, "scope": ex.Scope, "done": done}})
		g.markReached(ex)
	}
	return protocol.OutcomeBudgetExceeded, ex.Error() + "; done until then: " + done, true
}

func (g *guard) done() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	total := 0
	names := make([]string, 0, len(g.calls))
	for n, c := range g.calls {
		total += c
		names = append(names, fmt.Sprintf("%s×%d", n, c))
	}
	sort.Strings(names)
	s := fmt.Sprintf("%d model turn(s), %d tool call(s)", g.turns, total)
	if len(names) > 0 {
		s += " (" + strings.Join(names, ", ") + ")"
	}
	return s
}

// chargeModel records one model call's usage against the session and its root.
func (g *guard) chargeModel(ctx context.Context, model, ttl string, u protocol.Usage) {
	g.mu.Lock()
	g.turns++
	g.mu.Unlock()
	if !g.limited() || g.e.ledger == nil {
		return
	}
	d, known := govern.ModelDelta(model, ttl, u)
	if !known {
		g.mu.Lock()
		first := !g.unpriced
		g.unpriced = true
		g.mu.Unlock()
		if first && (g.own.MaxUSD > 0 || g.rootB.MaxUSD > 0) {
			g.e.d.Logger.Warn("model has no known price: max_usd cannot count its calls (add it to the price table)", "model", model, "session", g.session)
		}
	}
	if err := g.e.ledger.Charge(ctx, d, g.keys()...); err != nil {
		g.e.d.Logger.Warn("charge budget ledger", "session", g.session, "err", err)
	}
}

// beforeTool checks the limits before one tool call and charges it; a refused call makes the
// step end with budget_exceeded once the turn's results are in. depth is the depth a child
// session of an agent tool would have.
func (g *guard) beforeTool(ctx context.Context, spec protocol.ToolSpec, depth int) *govern.Exceeded {
	agent := spec.Agent != ""
	ex := g.check(ctx, func(scope string, b protocol.Budget, spent protocol.LedgerEntry) *govern.Exceeded {
		return govern.CheckTool(scope, b, spent, g.deadline, time.Now(), agent, depth)
	})
	if ex != nil {
		g.mu.Lock()
		if g.exceeded == nil {
			g.exceeded = ex
		}
		g.mu.Unlock()
		return ex
	}
	g.mu.Lock()
	g.calls[spec.Name]++
	g.mu.Unlock()
	if g.limited() && g.e.ledger != nil {
		d := protocol.LedgerEntry{ToolCalls: 1}
		if agent {
			d.Children = 1
		}
		if err := g.e.ledger.Charge(ctx, d, g.keys()...); err != nil {
			g.e.d.Logger.Warn("charge budget ledger", "session", g.session, "err", err)
		}
	}
	return nil
}

// toolDeadline is when a tool call's answer stops being useful: the call's own wait or the
// session's deadline, whichever is first.
func (g *guard) toolDeadline(wait time.Duration) time.Time {
	d := time.Now().Add(wait)
	if !g.deadline.IsZero() && g.deadline.Before(d) {
		return g.deadline
	}
	return d
}

// refused is the tool result of a call not made because a budget limit was reached.
func refused(ex *govern.Exceeded) protocol.ToolReply {
	return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrBudget,
		Error: "not run: " + ex.Error()}}
}

// interrupted marks a failed reply whose call was cut short by the session's cancel or
// deadline, so nobody mistakes it for the tool's own failure.
func interrupted(ctx context.Context, reply protocol.ToolReply) protocol.ToolReply {
	if reply.OK || ctx.Err() == nil {
		return reply
	}
	var ex *govern.Exceeded
	switch {
	case errors.As(context.Cause(ctx), &ex):
		reply.Kind = protocol.ToolErrBudget
	default:
		if _, ok := govern.AsCancelled(ctx); ok {
			reply.Kind = protocol.ToolErrCancelled
		}
	}
	return reply
}

// markReached records the limit in the ledger entry of the budget it belongs to, so every other
// session of the tree (the root waiting on this child, its siblings on other executors) stops
// at its next check, whatever the limit: a depth or fan-out limit has no figure they could see.
func (g *guard) markReached(ex *govern.Exceeded) {
	if g.e.ledger == nil || ex.Scope == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.e.ledger.Charge(ctx, protocol.LedgerEntry{Exceeded: ex.Stop()}, ex.Scope); err != nil {
		g.e.d.Logger.Warn("record budget limit in the ledger", "session", g.session, "scope", ex.Scope, "err", err)
	}
}
