package planner_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
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
	evs := sessiontest.WaitEnd(t, r.m.Conn, r.m.Names, sid)
	end := sessiontest.Only(t, evs, protocol.EvIncomplete, protocol.RolePlanner)
	if end.Outcome != protocol.OutcomeCancelled || end.Reason != "cancelled by tester: stop" {
		t.Fatalf("end %s %q; want cancelled by tester", end.Outcome, end.Reason)
	}
	r.serve(t)
	// The executor takes the two queued steps and drops them: the session is over. Once it has
	// handled both, the dependent step must not be published nor any step start for a second.
	poll.Eventually(t, 30*time.Second, "the executor to take the queued steps", func() error {
		cons, err := r.m.Conn.JS.Consumer(ctx, r.m.Names.Stream(protocol.StreamWork), r.m.Names.ExecutorConsumer(agent))
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			return fmt.Errorf("%d steps waiting, %d unacknowledged", info.NumPending, info.NumAckPending)
		}
		return nil
	})
	poll.Quiet(t, time.Second, "the cancelled session running nothing", func() error {
		for _, ev := range sessiontest.Events(t, r.m.Conn, r.m.Names, sid) {
			if ev.Type == protocol.EvStepStarted {
				return fmt.Errorf("a step of the cancelled session started: %+v", ev)
			}
		}
		for {
			select {
			case msg := <-r.wire:
				var st protocol.Step
				if msg.Subject == r.m.Names.Work(agent) && protocol.Unmarshal(msg.Data, &st) == nil && st.StepID == "s3" {
					return fmt.Errorf("the dependent step was published after the cancel")
				}
			default:
				return nil
			}
		}
	})
	if s := sessiontest.Record(t, r.m.Conn, r.m.Names, sid); s.Status != protocol.StatusDone || s.Outcome != protocol.OutcomeCancelled {
		t.Fatalf("session record %s %s", s.Status, s.Outcome)
	}
}
