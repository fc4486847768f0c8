package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
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

// submitAll submits n tasks "<task> (i)" as the sessions "<prefix>-i" and returns their ids.
func submitAll(t *testing.T, c *bus.Conn, prefix, task string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		sessiontest.Submit(t, c, meshNames, protocol.SubmitRequest{Task: fmt.Sprintf("%s (%d)", task, i), SessionID: ids[i], Caller: "e2e"})
	}
	return ids
}

// waitTraces waits until the trace of one of the sessions shows what seen looks for: the
// moment a test kills a process.
func waitTraces(ctx context.Context, t *testing.T, c *bus.Conn, ids []string, what string, seen func([]protocol.Event) bool) {
	t.Helper()
	poll.True(t, sessiontest.EndTimeout, what, func() bool {
		for _, id := range ids {
			if evs, _ := trace.Read(ctx, c.JS, meshNames, id); seen(evs) {
				return true
			}
		}
		return false
	})
}

// followAll follows every session to its end at once and returns their traces, in the order
// of ids.
func followAll(ctx context.Context, t *testing.T, c *bus.Conn, ids []string) [][]protocol.Event {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	evs := make([][]protocol.Event, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs[i], errs[i] = sessiontest.Follow(ctx, c, meshNames, id)
		}()
	}
	wg.Wait()
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("%s: %v", id, errs[i])
		}
	}
	return evs
}

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
	ids := submitAll(t, c, "fault", "wait please", 8)
	// Wait until the victim is running a step, then crash it and the planner.
	victimPID := fmt.Sprintf("/%d", victim.cmd.Process.Pid)
	byVictim := func(ev protocol.Event) bool {
		return ev.Type == protocol.EvStepStarted && strings.HasSuffix(ev.Source, victimPID)
	}
	waitTraces(ctx, t, c, ids, "the victim executor to start a step", func(evs []protocol.Event) bool {
		return slices.ContainsFunc(evs, byVictim)
	})
	victim.kill()
	planner.kill()
	m.start(t, "planner-2", "planner")

	rescued := 0
	for i, evs := range followAll(ctx, t, c, ids) {
		victimStarted, redelivered := false, false
		var final protocol.Event
		for _, ev := range evs {
			switch {
			case byVictim(ev):
				victimStarted = true
			case ev.Type == protocol.EvStepFinished && victimStarted && !strings.HasSuffix(ev.Source, victimPID):
				redelivered = true
			case ev.Type.Terminal():
				final = ev
			}
		}
		if redelivered {
			rescued++
		}
		if final.Outcome != protocol.OutcomeSuccess {
			t.Fatalf("%s ended %s (%s)", ids[i], final.Outcome, final.Reason)
		}
	}
	if rescued == 0 {
		t.Fatal("no step the victim had started was finished by the survivor: the crash tested nothing")
	}
	t.Logf("%d step(s) redelivered from the killed executor", rescued)
}
