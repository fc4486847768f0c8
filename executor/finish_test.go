package executor

import (
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// The model reports through finish whether the task was accomplished: a give-up is
// not_accomplished (not a success, though no tool failed), an accomplished report after a
// failed tool is success_with_recovery, and a malformed report is answered so the model can
// correct it.
func TestFinishReportsAccomplishment(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	cfg := testConfig(testdata(t, "tools"), testTools...)
	cases := []struct {
		name, script string
		outcome      protocol.Outcome
		text, reason string
	}{
		{"give up", `
rules:
  - reply: {tool_calls: [{name: finish, args: {accomplished: false, answer: "Could not deploy.", reason: "the cluster refused the credentials"}}]}
`, protocol.OutcomeNotAccomplished, "Could not deploy.", "cluster refused"},
		{"done after a failure", `
rules:
  - when: {last: "could not write"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: "Deployed on the second try."}}]}
  - reply: {tool_calls: [{name: fail, args: {}}]}
`, protocol.OutcomeSuccessWithRecovery, "Deployed on the second try.", ""},
		{"malformed, then right", `
rules:
  - when: {last: "needs accomplished"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: "ok"}}]}
  - reply: {tool_calls: [{name: finish, args: {answer: "ok"}}]}
`, protocol.OutcomeSuccessWithRecovery, "ok", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{Backend: scriptBackend(t, c.script)}
			x := m.executor(t, cfg, rec)
			res, evs := m.runStep(t, x, step(t, cfg, "deploy "+c.name))
			if res.Outcome != c.outcome || res.FinalText != c.text || !strings.Contains(res.Reason, c.reason) {
				t.Fatalf("result %s %q (%s); want %s %q with %q", res.Outcome, res.FinalText, res.Reason, c.outcome, c.text, c.reason)
			}
			offered := false
			for _, d := range rec.requests()[0].Tools {
				offered = offered || d.Name == finishTool
			}
			if !offered {
				t.Fatal("finish was not offered to the model")
			}
			var decided bool
			for _, ev := range sessiontest.Of(evs, protocol.EvDecision, "") {
				decided = decided || ev.Text == "finish"
			}
			if !decided {
				t.Fatal("trace has no finish decision")
			}
		})
	}
}
