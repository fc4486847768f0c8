package planner_test

import (
	"context"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
	"github.com/skein-mesh/skein/planner"
)

// A session cancelled while its steps wait on WORK ends cancelled without any step running, and
// its dependent step is never published, even once an executor comes to pull the queued ones.
func TestCancelledSessionStartsNoQueuedStep(t *testing.T) {
	r := startRig(t, planner.ModeForce, fruitScript)
	const sid = "s-cancel-queued"
	r.submit(t, sid, fruitTask)
	for published := 0; published < 2; {
		if st, _ := r.next(t); st != nil {
			published++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rep protocol.CancelReply
	if err := bus.Request(ctx, r.m.Conn.NC, r.m.Names.Cancel(), &protocol.CancelRequest{SessionID: sid, By: "tester", Reason: "stop"}, &rep, 5*time.Second); err != nil || rep.Error != "" {
		t.Fatalf("cancel: %v %s", err, rep.Error)
	}
	evs := r.awaitEnd(t, sid)
	end := only(t, evs, protocol.EvIncomplete, protocol.RolePlanner)
	if end.Outcome != protocol.OutcomeCancelled || end.Reason != "cancelled by tester: stop" {
		t.Fatalf("end %s %q; want cancelled by tester", end.Outcome, end.Reason)
	}
	r.serve(t)
	// The executor takes the two queued steps and drops them: the session is over.
	time.Sleep(time.Second)
	all, err := trace.Read(ctx, r.m.Conn.JS, r.m.Names, sid)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range all {
		if ev.Type == protocol.EvStepStarted {
			t.Fatalf("a step of the cancelled session started: %+v", ev)
		}
	}
	for {
		select {
		case msg := <-r.wire:
			if msg.Subject == r.m.Names.Work(agent) {
				var st protocol.Step
				if protocol.Unmarshal(msg.Data, &st) == nil && st.StepID == "s3" {
					t.Fatal("the dependent step was published after the cancel")
				}
			}
			continue
		default:
		}
		break
	}
	if s := r.session(t, sid); s.Status != protocol.StatusDone || s.Outcome != protocol.OutcomeCancelled {
		t.Fatalf("session record %s %s", s.Status, s.Outcome)
	}
}
