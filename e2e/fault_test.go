package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/trace"
)

const faultAgent = assistantAgent + `tools:
  manifest_dirs: [$TESTTOOLS]
memory:
  enabled: false
`

const faultScript = `
rules:
  - when: {last: "slept"}
    reply: {text: "done waiting"}
  - when: {last: "^wait"}
    reply:
      tool_calls: [{name: slow, args: {seconds: 3}}]
`

// TestCrashesLoseNoAcceptedTask kills an executor and the planner with SIGKILL while tasks are in
// flight, starts a fresh planner, and checks every accepted task still ends in success.
func TestCrashesLoseNoAcceptedTask(t *testing.T) {
	m := newProcMesh(t, writeProject(t, faultAgent, faultScript))
	c := m.c
	m.start(t, "toolhost", "toolhost")
	victim := m.start(t, "executor-victim", "executor")
	m.start(t, "executor-survivor", "executor")
	planner := m.start(t, "planner-1", "planner")
	m.start(t, "gateway", "gateway")
	bustest.WaitAgent(t, c, meshNames, "assistant")
	bustest.WaitPullers(t, c, meshNames, "assistant", 2)
	bustest.WaitTools(t, c, meshNames, "slow")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const n = 8
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("fault-%d", i)
		sessiontest.Submit(t, c, meshNames, protocol.SubmitRequest{Task: fmt.Sprintf("wait please (%d)", i), SessionID: ids[i], Caller: "e2e"})
	}
	// Wait until the victim is running a step, then crash it and the planner.
	victimPID := fmt.Sprintf("/%d", victim.cmd.Process.Pid)
	byVictim := func(ev protocol.Event) bool {
		return ev.Type == protocol.EvStepStarted && strings.HasSuffix(ev.Source, victimPID)
	}
	poll.True(t, sessiontest.EndTimeout, "the victim executor to start a step", func() bool {
		for _, id := range ids {
			evs, _ := trace.Read(ctx, c.JS, protocol.NewNames(""), id)
			for _, ev := range evs {
				if byVictim(ev) {
					return true
				}
			}
		}
		return false
	})
	victim.kill()
	planner.kill()
	m.start(t, "planner-2", "planner")

	var wg sync.WaitGroup
	errs := make([]error, n)
	finals := make([]protocol.Event, n)
	redelivered := make([]bool, n)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs, err := sessiontest.Follow(ctx, c, meshNames, id)
			errs[i] = err
			victimStarted := false
			for _, ev := range evs {
				switch {
				case byVictim(ev):
					victimStarted = true
				case ev.Type == protocol.EvStepFinished && victimStarted && !strings.HasSuffix(ev.Source, victimPID):
					redelivered[i] = true
				case ev.Type.Terminal():
					finals[i] = ev
				}
			}
		}()
	}
	wg.Wait()
	rescued := 0
	for i, id := range ids {
		if redelivered[i] {
			rescued++
		}
		if errs[i] != nil {
			t.Fatalf("%s: %v", id, errs[i])
		}
		if finals[i].Outcome != protocol.OutcomeSuccess {
			t.Fatalf("%s ended %s (%s)", id, finals[i].Outcome, finals[i].Reason)
		}
	}
	if rescued == 0 {
		t.Fatal("no step the victim had started was finished by the survivor: the crash tested nothing")
	}
	t.Logf("%d step(s) redelivered from the killed executor", rescued)
}
