package trace

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// A node totals its own model calls per step, names its children from agent tool results and
// subagent usage, and leaves a child's tokens to the child's node.
func TestTreeNodeFromEvents(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	u := func(in, out int64) *protocol.Usage { return &protocol.Usage{InputTokens: in, OutputTokens: out} }
	evs := []protocol.Event{
		{Type: protocol.EvSessionStarted, Time: at(0), Agent: "assistant", Task: "plan a trip"},
		{Type: protocol.EvStepStarted, Time: at(0.1), StepID: "s1"},
		{Type: protocol.EvModelCall, Time: at(0.5), StepID: "s1", Role: protocol.RoleExecutor, Model: "scripted", Usage: u(100, 10)},
		{Type: protocol.EvToolCall, Time: at(1), StepID: "s1", Tool: "helper",
			Result: &protocol.ToolResult{OK: true, Result: json.RawMessage(`{"session_id":"a-child","outcome":"success"}`)}},
		{Type: protocol.EvModelCall, Time: at(1), StepID: "s1", Role: protocol.RoleSubagent, Model: "scripted", Usage: u(999, 99),
			Attrs: map[string]string{"child_session": "a-child"}},
		{Type: protocol.EvModelCall, Time: at(1.5), StepID: "s1", Role: protocol.RoleExecutor, Model: "scripted", Usage: u(200, 20)},
		{Type: protocol.EvStepFinished, Time: at(2.1), StepID: "s1", Turn: 2, Outcome: protocol.OutcomeSuccess},
		{Type: protocol.EvFinal, Time: at(2.2), Outcome: protocol.OutcomeSuccess},
		{Type: protocol.EvUsage, Time: at(2.3), Role: protocol.RolePlanner, Report: &protocol.UsageReport{WallTimeS: 2.3}},
	}
	n, kids := node("s", evs)
	if len(kids) != 1 || kids[0] != "a-child" {
		t.Fatalf("children %v", kids)
	}
	if n.Agent != "assistant" || n.Outcome != protocol.OutcomeSuccess || n.Turns != 2 || n.ToolCalls != 1 || n.WallTimeS != 2.3 {
		t.Fatalf("node %+v", n)
	}
	if n.Usage.InputTokens != 300 || n.Usage.OutputTokens != 30 || n.CostUSD == nil || *n.CostUSD != 0 {
		t.Fatalf("usage %+v cost %v; want the session's own 300/30 (not the child's)", n.Usage, n.CostUSD)
	}
	if len(n.Steps) != 1 || n.Steps[0].Turns != 2 || n.Steps[0].Usage.InputTokens != 300 || n.Steps[0].WallTimeS != 2 {
		t.Fatalf("steps %+v", n.Steps)
	}
}
