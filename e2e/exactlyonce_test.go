package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

const effectScript = `
rules:
  - when: {last: "appended"}
    reply: {text: "effect done"}
  - when: {last: "^effect"}
    reply:
      tool_calls: [{name: effect, args: {note: "x", seconds: 3}}]
`

// TestKilledExecutorDuplicatesNoSideEffect kills an executor with SIGKILL while its steps'
// side-effecting tool calls run. The steps are redelivered to the surviving executor, which asks
// for the same call ids; the toolhost answers from its records (or waits for the run in flight),
// so every session finishes and no effect happens twice.
func TestKilledExecutorDuplicatesNoSideEffect(t *testing.T) {
	devtest.NeedProgram(t, "python3")
	effects := effectLog(t)
	m := newProcMesh(t, writeProject(t, faultAgent, effectScript), "EFFECT_LOG="+effects)
	c := m.c
	m.start(t, "toolhost", "toolhost")
	victim := m.start(t, "executor-victim", "executor")
	m.start(t, "executor-survivor", "executor")
	m.start(t, "planner", "planner")
	m.start(t, "gateway", "gateway")
	bustest.WaitAgent(t, c, meshNames, "assistant")
	bustest.WaitPullers(t, c, meshNames, "assistant", 2)
	bustest.WaitTools(t, c, meshNames, "effect")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const n = 8
	ids := submitAll(t, c, "once", "effect please", n)
	// Crash the victim while a tool call of one of its steps is running.
	victimPID := fmt.Sprintf("/%d", victim.cmd.Process.Pid)
	waitTraces(ctx, t, c, ids, "a tool call of the victim executor to start", func(evs []protocol.Event) bool {
		victims := false
		for _, ev := range evs {
			if ev.Type == protocol.EvStepStarted && strings.HasSuffix(ev.Source, victimPID) {
				victims = true
			}
			if victims && ev.Type == protocol.EvToolAttempt && ev.Attrs["attempt"] == protocol.AttemptRun {
				return true
			}
		}
		return false
	})
	victim.kill()
	killed := time.Now()

	rescued, repeats := 0, 0
	var recovery time.Duration
	for i, evs := range followAll(ctx, t, c, ids) {
		id := ids[i]
		victimStarted := false
		for _, ev := range evs {
			switch {
			case ev.Type == protocol.EvStepStarted && strings.HasSuffix(ev.Source, victimPID):
				victimStarted = true
			case ev.Type == protocol.EvStepStarted && victimStarted:
				rescued++
				recovery = max(recovery, ev.Time.Sub(killed))
			case ev.Type == protocol.EvToolAttempt && ev.Attrs["attempt"] != protocol.AttemptRun:
				repeats++
			case ev.Type.Terminal() && ev.Outcome != protocol.OutcomeSuccess:
				t.Fatalf("%s ended %s (%s)", id, ev.Outcome, ev.Reason)
			}
		}
	}
	if rescued == 0 {
		t.Fatal("no step the victim had started was run again by the survivor: the crash tested nothing")
	}
	if repeats == 0 {
		t.Fatal("no tool call was answered from a record or a run in flight: the crash tested nothing")
	}

	// Every session's one call ran exactly once (one attempt line: the mesh did not run it
	// again, whatever the tool's own idempotency would have absorbed), and the tool saw its id.
	ran := map[string]int{}
	f, err := os.Open(effects)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct{ Env, Arg, Kind string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Kind != "attempt" {
			continue
		}
		if l.Env == "" || l.Env != l.Arg {
			t.Errorf("effect line %s: the tool did not see its call id in both the environment and the arguments", sc.Text())
		}
		ran[l.Env]++
	}
	for _, id := range ids {
		callID := protocol.ToolCallID(id, "s1", 1, 0)
		if ran[callID] != 1 {
			t.Errorf("call %s ran %d times, want exactly 1", callID, ran[callID])
		}
	}
	if len(ran) != n {
		t.Errorf("effects from %d call ids, want %d: %v", len(ran), n, ran)
	}
	t.Logf("%d step(s) rescued from the killed executor, %d repeated call(s) answered without running, slowest rescue started %s after the kill",
		rescued, repeats, recovery.Round(100*time.Millisecond))
}
