package planner_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/planner"
)

// TestSessionOfAnUnservedAgentEnds: the agent's only executor registers, the task is accepted
// and its step published, then the executor is gone (it never pulls and its registration is never
// refreshed). Once the registration has been lapsed for mesh.queue_timeout the planner ends the
// session failed, saying why, instead of leaving it running while the step waits in WORK.
func TestSessionOfAnUnservedAgentEnds(t *testing.T) {
	r := startRig(t, planner.ModeOff, "rules:\n  - reply: {text: \"never asked\"}\n", func(c *config.Config) {
		c.Mesh.AgentTTL, c.Mesh.QueueTimeout = "1s", "1s"
	})
	r.submit(t, "unserved-1", "anything")
	if st, _ := r.next(t); st == nil || st.SessionID != "unserved-1" {
		t.Fatalf("want the session's step on WORK first, got %+v", st)
	}
	evs := sessiontest.WaitEnd(t, r.m.Conn, r.m.Names, "unserved-1")
	failed := sessiontest.Only(t, evs, protocol.EvFailed, protocol.RolePlanner)
	if failed.Outcome != protocol.OutcomeFailed || !strings.Contains(failed.Reason, `no executor has served agent "tester"`) ||
		!strings.Contains(failed.Reason, "mesh.queue_timeout") {
		t.Fatalf("failed event %+v, want outcome failed naming the agent and mesh.queue_timeout", failed)
	}
	// The planner marks the session done just after its last events.
	poll.Eventually(t, 30*time.Second, "the session done / failed", func() error {
		if s := sessiontest.Record(t, r.m.Conn, r.m.Names, "unserved-1"); s.Status != protocol.StatusDone || s.Outcome != protocol.OutcomeFailed {
			return fmt.Errorf("session %s / %s", s.Status, s.Outcome)
		}
		return nil
	})
	if got := sessiontest.Of(evs, protocol.EvStepStarted, ""); len(got) != 0 {
		t.Fatalf("a step started: %+v", got)
	}
}
