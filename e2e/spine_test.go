package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

const spineAgent = `
agent:
  name: assistant
  max_steps: 5
llm:
  provider: scripted
  model: scripted
  script: script.yaml
tools:
  manifest_dirs: [$TOOLS]
  enabled: [echo, sum, wordcount]
  max_parallel: 3
memory:
  enabled: false
`

// The scripted model calls all three example tools (Python, Go, Node) in one turn, then answers.
const spineScript = `
rules:
  - when: {last: "^compute"}
    reply:
      text: "Calling three tools at once."
      tool_calls:
        - {name: sum, args: {numbers: [2, 3, 5]}}
        - {name: echo, args: {text: "hi there", upper: true}}
        - {name: wordcount, args: {text: "one two two"}}
  - when: {last: "HI THERE"}
    reply: {text: "The total is 10."}
`

// TestSpineAcrossProcesses is the multi-process proof: one NATS server and every role as its own
// OS process (two executors, two toolhosts), 50 tasks submitted at once.
func TestSpineAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	url := natsServer(t)
	cfg := writeProject(t, spineAgent, spineScript)
	c := connect(t, url)
	home := t.TempDir()
	env := []string{"SKEIN_HOME=" + home}
	args := []string{"--nats", url, "--config", cfg}
	start(t, env, "toolhost-1", "toolhost", args...)
	start(t, env, "toolhost-2", "toolhost", args...)
	start(t, env, "executor-1", "executor", args...)
	start(t, env, "executor-2", "executor", args...)
	start(t, env, "planner", "planner", args...)
	start(t, env, "gateway", "gateway", args...)
	bustest.WaitAgent(t, c, meshNames, "assistant")
	bustest.WaitPullers(t, c, meshNames, "assistant", 2)
	bustest.WaitTools(t, c, meshNames, "sum", "echo", "wordcount")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const n = 50
	began := time.Now()
	type outcome struct {
		session string
		events  []protocol.Event
		err     error
	}
	results := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("spine-%02d", i)
			if _, err := sessiontest.Send(ctx, c, meshNames, protocol.SubmitRequest{Task: fmt.Sprintf("compute task %d", i), SessionID: id, Caller: "e2e"}); err != nil {
				results[i] = outcome{session: id, err: err}
				return
			}
			evs, err := sessiontest.Follow(ctx, c, meshNames, id)
			results[i] = outcome{session: id, events: evs, err: err}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)

	executors := map[string]int{}
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("%s: %v", r.session, r.err)
		}
		checkCompleteTrace(t, r.session, r.events)
		for _, ev := range r.events {
			if ev.Type == protocol.EvStepStarted {
				executors[ev.Source]++
			}
		}
	}
	if len(executors) != 2 {
		t.Fatalf("steps ran on %d executor(s), want both: %v", len(executors), executors)
	}
	t.Logf("%d tasks in %.1fs (%.1f tasks/s, %d tool calls); steps per executor: %v",
		n, elapsed.Seconds(), float64(n)/elapsed.Seconds(), 3*n, executors)
}

// checkCompleteTrace asserts a session's trace tells the whole story in order.
func checkCompleteTrace(t *testing.T, session string, evs []protocol.Event) {
	t.Helper()
	want := []protocol.EventType{protocol.EvSessionStarted, protocol.EvPlan, protocol.EvStepStarted,
		protocol.EvModelCall, protocol.EvToolCall, protocol.EvStepFinished, protocol.EvFinal, protocol.EvUsage}
	seen := map[protocol.EventType]int{}
	var order []string
	for _, ev := range evs {
		seen[ev.Type]++
		order = append(order, string(ev.Type))
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Fatalf("%s: trace has no %s event: %s", session, w, strings.Join(order, ","))
		}
	}
	if evs[0].Type != protocol.EvSessionStarted || evs[len(evs)-1].Type != protocol.EvUsage {
		t.Fatalf("%s: trace must start with session_started and end with usage: %s", session, strings.Join(order, ","))
	}
	if seen[protocol.EvToolCall] != 3 || seen[protocol.EvModelCall] != 2 {
		t.Fatalf("%s: %d tool calls and %d model calls, want 3 and 2", session, seen[protocol.EvToolCall], seen[protocol.EvModelCall])
	}
	var final protocol.Event
	for _, ev := range evs {
		if ev.Type == protocol.EvToolCall && (ev.Result == nil || !ev.Result.OK) {
			t.Fatalf("%s: tool %s failed: %+v", session, ev.Tool, ev.Result)
		}
		if ev.Type == protocol.EvFinal {
			final = ev
		}
	}
	if final.Outcome != protocol.OutcomeSuccess || final.Text != "The total is 10." {
		t.Fatalf("%s: final = %s %q", session, final.Outcome, final.Text)
	}
	u := evs[len(evs)-1].Report
	if u == nil || u.InputTokens == 0 || u.OutputTokens == 0 || u.Turns != 2 || u.Steps != 2 {
		t.Fatalf("%s: usage report %+v", session, u)
	}
}
