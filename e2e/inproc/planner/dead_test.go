package planner_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/worker"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/planner"
)

// A step that reaches the DLQ (here its executor refuses it for good) would leave its session
// running for ever: the planner reads the dead letter and ends the session failed, with the
// dead letter's reason.
func TestASessionWhoseStepIsDeadLetteredEnds(t *testing.T) {
	r := startRig(t, planner.ModeOff, "rules:\n  - reply: {text: \"never asked\"}\n")
	r.submit(t, "dead-step", "anything")
	if st, _ := r.next(t); st == nil || st.SessionID != "dead-step" {
		t.Fatalf("want the session's step on WORK first, got %+v", st)
	}
	spec, err := bus.Consumers(r.m.Names, bus.KindExecutor, agent, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := worker.New(ctx, r.m.Conn, r.m.Names, spec, worker.Options{}, func(context.Context, jetstream.Msg) error {
		return worker.Permanent(errors.New("the step is poisoned"))
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.Run(ctx) }()
	evs := sessiontest.WaitEnd(t, r.m.Conn, r.m.Names, "dead-step")
	failed := sessiontest.Only(t, evs, protocol.EvFailed, protocol.RolePlanner)
	if failed.Outcome != protocol.OutcomeFailed || !strings.Contains(failed.Reason, "its step s1 was dead-lettered") ||
		!strings.Contains(failed.Reason, "the step is poisoned") {
		t.Fatalf("failed event %+v, want outcome failed with the dead letter's reason", failed)
	}
}

// A task that reaches the DLQ before it was planned ends its session failed too, though no step
// of it ever existed.
func TestASessionWhoseTaskIsDeadLetteredEnds(t *testing.T) {
	r := startRig(t, planner.ModeOff, "rules:\n  - reply: {text: \"never asked\"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The gateway's record of a session whose task the planners gave up on, and the dead letter
	// a worker writes for it.
	now := time.Now().UTC()
	sess := protocol.Session{SessionID: "dead-task", Agent: agent, Task: "anything", Status: protocol.StatusQueued, Created: now, Updated: now}
	data, err := protocol.Marshal(&sess)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := bus.KV(ctx, r.m.Conn.JS, r.m.Names, protocol.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, sess.SessionID, data); err != nil {
		t.Fatal(err)
	}
	task, err := protocol.Marshal(&protocol.Task{SessionID: sess.SessionID, Agent: agent, Task: sess.Task, SubmittedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	dead := nats.NewMsg(r.m.Names.DLQ(r.m.Names.Stream(protocol.StreamTasks)))
	dead.Data = task
	for k, v := range map[string]string{bus.HeaderDLQSubject: r.m.Names.Task(agent), bus.HeaderDLQStream: r.m.Names.Stream(protocol.StreamTasks),
		bus.HeaderDLQConsumer: protocol.ConsumerPlanner, bus.HeaderDLQSequence: "1", bus.HeaderDLQDeliveries: "10",
		bus.HeaderDLQReason: "failed on all 10 deliveries; last error: the planning model is down"} {
		dead.Header.Set(k, v)
	}
	if _, err := r.m.Conn.JS.PublishMsg(ctx, dead); err != nil {
		t.Fatal(err)
	}
	evs := sessiontest.WaitEnd(t, r.m.Conn, r.m.Names, "dead-task")
	failed := sessiontest.Only(t, evs, protocol.EvFailed, protocol.RolePlanner)
	if failed.Outcome != protocol.OutcomeFailed || !strings.Contains(failed.Reason, "its task was dead-lettered after 10 deliveries") ||
		!strings.Contains(failed.Reason, "the planning model is down") {
		t.Fatalf("failed event %+v, want outcome failed with the dead letter's reason", failed)
	}
	if s := sessiontest.Record(t, r.m.Conn, r.m.Names, "dead-task"); s.Status != protocol.StatusDone && s.Status != protocol.StatusRunning {
		t.Errorf("session status %s after its end event", s.Status)
	}
}
