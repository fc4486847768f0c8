package miner

import (
	"testing"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Calls stopped by a cancel or a budget are not the tool's failures: nothing is mined from them,
// and a session that did not succeed teaches no success pattern.
func TestMineSkipsInterruptedCallsAndUnsuccessfulPatterns(t *testing.T) {
	for _, outcome := range []protocol.Outcome{protocol.OutcomeCancelled, protocol.OutcomeBudgetExceeded, protocol.OutcomeNotAccomplished} {
		evs := []protocol.Event{
			{SessionID: "s", Type: protocol.EvSessionStarted, Agent: "demo", Task: "deploy"},
			toolEv("build", `{}`, protocol.ToolResult{OK: true}),
			toolEv("deploy", `{}`, protocol.ToolResult{Kind: protocol.ToolErrCancelled, Error: "call abandoned; killed"}),
			toolEv("deploy", `{"x":1}`, protocol.ToolResult{Kind: protocol.ToolErrBudget, Error: "not run: budget max_tool_calls reached"}),
			{SessionID: "s", Type: protocol.EvIncomplete, Outcome: outcome},
			{SessionID: "s", Type: protocol.EvUsage, Report: &protocol.UsageReport{}},
		}
		if got := Mine(ParseSession("s", evs)); len(got) != 0 {
			t.Errorf("%s: mined %+v; want nothing", outcome, got)
		}
	}
}
