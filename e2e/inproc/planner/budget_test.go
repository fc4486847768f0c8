package planner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/planner"
)

func (r *rig) submitBudget(t *testing.T, session, task string, b protocol.Budget) {
	t.Helper()
	sessiontest.Submit(t, r.m.Conn, r.m.Names, protocol.SubmitRequest{SessionID: session, Agent: agent, Task: task, Budget: &b})
}

// The planning call is charged to the session's ledger entry like the executors' calls: one
// turn, and its tokens, so a budget holds whichever role makes the call.
func TestPlanningCallIsChargedToTheSessionsLedger(t *testing.T) {
	r := startRig(t, planner.ModeForce, fruitScript)
	const sid = "s-plan-charged"
	r.submitBudget(t, sid, fruitTask, protocol.Budget{MaxTurns: 50})
	r.serve(t)
	evs := sessiontest.WaitEnd(t, r.m.Conn, r.m.Names, sid)
	if end := sessiontest.Only(t, evs, protocol.EvFinal, protocol.RolePlanner); end.Outcome != protocol.OutcomeSuccess {
		t.Fatalf("outcome %s (%s)", end.Outcome, end.Reason)
	}
	var calls int
	var input int64
	for _, ev := range sessiontest.Of(evs, protocol.EvModelCall, "") {
		calls++
		input += ev.Usage.InputTokens + ev.Usage.CacheCreationInputTokens + ev.Usage.CacheReadInputTokens
	}
	if calls != 4 || len(sessiontest.Of(evs, protocol.EvModelCall, protocol.RolePlanner)) != 1 {
		t.Fatalf("%d model calls; want the planning call and one per step", calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := govern.OpenLedger(ctx, r.m.Conn.JS, r.m.Names)
	if err != nil {
		t.Fatal(err)
	}
	spent, err := l.Get(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if spent.Turns != calls || spent.InputTokens != input {
		t.Fatalf("ledger has %d turns, %d input tokens; want %d and %d (the planning call included)", spent.Turns, spent.InputTokens, calls, input)
	}
}

// A session tree whose budget is spent before planning is not planned: no planning call is
// made, and its one step ends budget_exceeded.
func TestSpentBudgetIsNotPlanned(t *testing.T) {
	// The planner starts once the deadline has passed: started before, it may take the task
	// within the millisecond and rightly plan it.
	r := startRigWithoutPlanner(t, planner.ModeForce, fruitScript)
	const sid = "s-plan-spent"
	r.submitBudget(t, sid, fruitTask, protocol.Budget{DeadlineS: 0.001})
	deadline := sessiontest.Record(t, r.m.Conn, r.m.Names, sid).Deadline
	poll.True(t, time.Second, "the session's deadline passing", func() bool { return time.Now().After(deadline) })
	r.startPlanner(t)
	r.serve(t)
	evs := sessiontest.WaitEnd(t, r.m.Conn, r.m.Names, sid)
	if n := len(sessiontest.Of(evs, protocol.EvModelCall, protocol.RolePlanner)); n != 0 {
		t.Fatalf("%d planning calls for a session past its deadline", n)
	}
	dec := sessiontest.Only(t, evs, protocol.EvDecision, protocol.RolePlanner)
	if !strings.Contains(dec.Text, "not planning: budget deadline_s reached") {
		t.Fatalf("decision %q; want it to name the limit", dec.Text)
	}
	if end := sessiontest.Only(t, evs, protocol.EvIncomplete, protocol.RolePlanner); end.Outcome != protocol.OutcomeBudgetExceeded {
		t.Fatalf("outcome %s (%s); want budget_exceeded", end.Outcome, end.Reason)
	}
}
