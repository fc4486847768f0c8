package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/bus/worker"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/trace"
)

// serve runs x.Serve until the test ends.
func serve(t *testing.T, x *Executor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = x.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// publishStep publishes a step to WORK as a planner does, its session recorded as running
// first (an executor refuses a step whose session does not exist) unless a record is there.
func publishStep(t *testing.T, m *mesh, st protocol.Step) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess := protocol.Session{SessionID: st.SessionID, Agent: st.Agent, Task: st.Task, Status: protocol.StatusRunning,
		Plan: []protocol.PlanStep{{StepID: st.StepID, Status: protocol.StepPublished}}}
	if rec, err := protocol.Marshal(&sess); err != nil {
		t.Fatal(err)
	} else if _, err := sessionsKV(t, m).Create(ctx, st.SessionID, rec); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("record session: %v", err)
	}
	publishStepOnly(t, m, st)
}

// publishStepOnly publishes a step to WORK without touching the sessions bucket.
func publishStepOnly(t *testing.T, m *mesh, st protocol.Step) {
	t.Helper()
	data, err := protocol.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.Conn.JS.Publish(ctx, m.Names.Work(st.Agent), data); err != nil {
		t.Fatalf("publish step: %v", err)
	}
}

func sessionsKV(t *testing.T, m *mesh) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// subscribeResults subscribes to the step results of session until the test ends.
func subscribeResults(t *testing.T, m *mesh, session string) *nats.Subscription {
	t.Helper()
	sub, err := m.Conn.NC.SubscribeSync(m.Names.Result(session))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

func awaitResult(t *testing.T, sub *nats.Subscription) protocol.StepResult {
	t.Helper()
	msg, err := sub.NextMsg(60 * time.Second)
	if err != nil {
		t.Fatalf("no step result: %v", err)
	}
	var res protocol.StepResult
	if err := protocol.Unmarshal(msg.Data, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// awaitSettled waits until the executor's consumer has been handed n messages and holds none.
func awaitSettled(t *testing.T, m *mesh, agent string, n uint64) *jetstream.ConsumerInfo {
	t.Helper()
	var info *jetstream.ConsumerInfo
	poll.Eventually(t, 60*time.Second, fmt.Sprintf("the work consumer to settle after %d messages", n), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := m.Conn.JS.Consumer(ctx, m.Names.Stream(protocol.StreamWork), m.Names.ExecutorConsumer(agent))
		if err != nil {
			return err
		}
		if info, err = c.Info(ctx); err != nil {
			return err
		}
		if info.Delivered.Stream < n || info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("delivered %d, %d ack pending, %d pending", info.Delivered.Stream, info.NumAckPending, info.NumPending)
		}
		return nil
	})
	return info
}

func stepsStarted(t *testing.T, m *mesh, session string) int {
	t.Helper()
	return len(sessiontest.Of(sessiontest.Events(t, m.Conn, m.Names, session), protocol.EvStepStarted, ""))
}

// A step delivered again after its result is recorded in the sessions KV is acked unrun.
func TestRedeliveredDoneStepIsAckedWithoutRunning(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	cfg := testConfig(testdata(t, "tools"), testTools...)
	x := m.executor(t, cfg, scriptBackend(t, "rules:\n  - reply: {text: done}\n"))
	serve(t, x)
	st := step(t, cfg, "once only")
	sub := subscribeResults(t, m, st.SessionID)

	publishStep(t, m, st)
	if res := awaitResult(t, sub); res.Outcome != protocol.OutcomeSuccess || res.Executor != "executor-under-test" {
		t.Fatalf("result %+v", res)
	}
	awaitSettled(t, m, cfg.Agent.Name, 1)

	// The planner records the step as done; a duplicate of the work message then arrives.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	sess := protocol.Session{SessionID: st.SessionID, Agent: st.Agent, Task: st.Task, Status: protocol.StatusRunning,
		Plan: []protocol.PlanStep{{StepID: st.StepID, Status: protocol.StepDone, Outcome: protocol.OutcomeSuccess}}}
	data, err := protocol.Marshal(&sess)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, st.SessionID, data); err != nil {
		t.Fatal(err)
	}
	publishStep(t, m, st)
	awaitSettled(t, m, cfg.Agent.Name, 2)

	if n := stepsStarted(t, m, st.SessionID); n != 1 {
		t.Fatalf("%d step_started events, want 1: the duplicate ran", n)
	}
	if msg, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a second result was published: %d bytes", len(msg.Data))
	}
}

// A step that runs longer than the ack wait is kept alive by heartbeats, not redelivered.
func TestHeartbeatKeepsLongStepFromRedelivery(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	cfg := testConfig(testdata(t, "tools"), testTools...)
	cfg.Mesh.AckWait = "2s" // mesh.ack_wait reaches the executor's consumer
	x := m.executor(t, cfg, scriptBackend(t, `
rules:
  - when: {last: "slept_s"}
    reply: {text: "woke up"}
  - reply: {tool_calls: [{name: sleep, args: {seconds: 5}}]}
`))
	serve(t, x)
	st := step(t, cfg, "take your time")
	sub := subscribeResults(t, m, st.SessionID)

	publishStep(t, m, st)
	if res := awaitResult(t, sub); res.Outcome != protocol.OutcomeSuccess {
		t.Fatalf("result %+v", res)
	}
	info := awaitSettled(t, m, cfg.Agent.Name, 1)
	if info.Config.AckWait != 2*time.Second {
		t.Fatalf("consumer AckWait %v, want mesh.ack_wait's 2s", info.Config.AckWait)
	}
	if info.NumRedelivered != 0 || info.Delivered.Consumer != 1 {
		t.Errorf("consumer delivered %d times (%d redelivered), want once", info.Delivered.Consumer, info.NumRedelivered)
	}
	if n := stepsStarted(t, m, st.SessionID); n != 1 {
		t.Fatalf("%d step_started events, want 1: the step was redelivered while it ran", n)
	}
}

// admit runs a step of a running session, acks a redelivered one already done, and refuses
// into the DLQ a step whose session does not exist or ended before it ran.
func TestAdmit(t *testing.T) {
	m := &mesh{Mesh: bustest.Start(t)}
	cfg := testConfig(t.TempDir())
	x := m.executor(t, cfg, scriptBackend(t, "rules:\n  - reply: {text: done}\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv := sessionsKV(t, m)
	put := func(s protocol.Session) {
		data, err := protocol.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, s.SessionID, data); err != nil {
			t.Fatal(err)
		}
	}
	put(protocol.Session{SessionID: "finished", Status: protocol.StatusDone, Outcome: protocol.OutcomeCancelled,
		Plan: []protocol.PlanStep{{StepID: "s1", Status: protocol.StepDone}, {StepID: "s2", Status: protocol.StepPublished}}})
	put(protocol.Session{SessionID: "running", Status: protocol.StatusRunning, Plan: []protocol.PlanStep{
		{StepID: "s1", Status: protocol.StepDone}, {StepID: "s2", Status: protocol.StepPublished}}})
	for _, c := range []struct {
		session, step string
		done          bool
		refused       string // part of the DLQ reason; "" runs or acks
	}{
		{"finished", "s1", true, ""},
		{"finished", "s2", false, "ended (cancelled) before the step ran"},
		{"running", "s1", true, ""},
		{"running", "s2", false, ""},
		{"running", "s3", false, ""},
		{"unknown", "s1", false, "session unknown does not exist"},
	} {
		done, err := x.admit(ctx, protocol.Step{SessionID: c.session, StepID: c.step})
		switch {
		case c.refused == "" && (err != nil || done != c.done):
			t.Errorf("admit(%s, %s) = %v, %v; want %v, nil", c.session, c.step, done, err, c.done)
		case c.refused != "" && (!worker.IsPermanent(err) || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("admit(%s, %s) = %v, %v; want a permanent refusal saying %q", c.session, c.step, done, err, c.refused)
		}
	}
}

// A step whose session does not exist, or ended before it ran, reaches the DLQ with the reason,
// on a real server through the executor's consumer, and none of its tools runs.
func TestStepOfAMissingOrEndedSessionIsDeadLetteredUnrun(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	cfg := testConfig(testdata(t, "tools"), testTools...)
	x := m.executor(t, cfg, scriptBackend(t, "rules:\n  - reply: {tool_calls: [{name: sleep, args: {seconds: 0}}]}\n"))
	serve(t, x)

	ghost := step(t, cfg, "run a tool for nobody")
	ghost.SessionID += "-ghost"
	ended := step(t, cfg, "run a tool too late")
	ended.SessionID += "-ended"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := protocol.Marshal(&protocol.Session{SessionID: ended.SessionID, Agent: ended.Agent, Task: ended.Task,
		Status: protocol.StatusDone, Outcome: protocol.OutcomeCancelled, Plan: []protocol.PlanStep{{StepID: ended.StepID, Status: protocol.StepPublished}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionsKV(t, m).Put(ctx, ended.SessionID, rec); err != nil {
		t.Fatal(err)
	}
	publishStepOnly(t, m, ghost)
	publishStepOnly(t, m, ended)
	awaitSettled(t, m, cfg.Agent.Name, 2)

	dlq, err := m.Conn.JS.Stream(ctx, m.Names.Stream(protocol.StreamDLQ))
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	poll.True(t, 20*time.Second, "both steps in the DLQ", func() bool {
		info, err := dlq.Info(ctx)
		if err != nil {
			return false
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			if msg, err := dlq.GetMsg(ctx, seq); err == nil {
				var st protocol.Step
				if protocol.Unmarshal(msg.Data, &st) == nil {
					reasons[st.SessionID] = msg.Header.Get(bus.HeaderDLQReason)
				}
			}
		}
		return len(reasons) == 2
	})
	for id, want := range map[string]string{ghost.SessionID: "does not exist", ended.SessionID: "ended (cancelled) before the step ran"} {
		if !strings.Contains(reasons[id], want) {
			t.Errorf("dead letter of %s: reason %q, want it to say %q", id, reasons[id], want)
		}
	}
	for _, id := range []string{ghost.SessionID, ended.SessionID} {
		evs, err := trace.Read(ctx, m.Conn.JS, m.Names, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 0 {
			t.Errorf("session %s: %d trace events (first %s); the refused step must not start, call a model or run a tool", id, len(evs), evs[0].Type)
		}
	}
}

// A step delivered again after it finished, before the planner recorded it, answers with the
// recorded result instead of running again (the RESULTS dedup window may be long gone).
func TestRedeliveredFinishedStepRepublishesItsRecordedResult(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	cfg := testConfig(testdata(t, "tools"), testTools...)
	x := m.executor(t, cfg, scriptBackend(t, "rules:\n  - reply: {text: done}\n"))
	serve(t, x)
	st := step(t, cfg, "answer once")
	sub := subscribeResults(t, m, st.SessionID)

	publishStep(t, m, st)
	first := awaitResult(t, sub)
	awaitSettled(t, m, cfg.Agent.Name, 1)
	publishStep(t, m, st) // the session KV does not say done: the planner never saw the result
	second := awaitResult(t, sub)
	awaitSettled(t, m, cfg.Agent.Name, 2)

	if n := stepsStarted(t, m, st.SessionID); n != 1 {
		t.Fatalf("%d step_started events, want 1: the redelivered step ran again", n)
	}
	if second.FinalText != first.FinalText || second.Outcome != first.Outcome || second.Executor != first.Executor {
		t.Fatalf("republished result %+v, want the recorded %+v", second, first)
	}
}

// A serving executor keeps its agent's registration fresh; the gateway refuses the agent once
// it lapses.
func TestServingExecutorHeartbeatsItsRegistration(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	cfg := testConfig(testdata(t, "tools"), testTools...)
	cfg.Mesh.AgentTTL = "900ms"
	x := m.executor(t, cfg, scriptBackend(t, "rules:\n  - reply: {text: done}\n"))
	serve(t, x)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	read := func() protocol.AgentSpec {
		e, err := kv.Get(ctx, cfg.Agent.Name)
		if err != nil {
			t.Fatal(err)
		}
		var s protocol.AgentSpec
		if err := protocol.Unmarshal(e.Value(), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := read()
	if first.Expires.IsZero() || first.Executor != "executor-under-test" {
		t.Fatalf("registration %+v has no expiry or executor", first)
	}
	poll.Quiet(t, 1500*time.Millisecond, "the registration to stay live for longer than its TTL", func() error {
		if s := read(); s.Lapsed(time.Now()) {
			return fmt.Errorf("lapsed: expires %v", s.Expires)
		}
		return nil
	})
	later := read()
	if !later.Expires.After(first.Expires) || later.Lapsed(time.Now()) {
		t.Fatalf("registration not refreshed: first expires %v, later %v", first.Expires, later.Expires)
	}
}
