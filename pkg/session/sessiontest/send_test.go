package sessiontest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// Send returns the session id of a task taken, and a refusal as an error that keeps its code,
// for callers that must not fail the test from their own goroutine.
func TestSendReturnsTheRefusalWithItsCode(t *testing.T) {
	m := bustest.Start(t)
	sub, err := m.Conn.NC.Subscribe(m.Names.Submit(), func(msg *nats.Msg) {
		var req protocol.SubmitRequest
		rep := protocol.SubmitReply{}
		if err := protocol.Unmarshal(msg.Data, &req); err != nil {
			rep.Fail(err)
		}
		rep.SessionID = req.SessionID
		if req.Task == "refuse me" {
			rep.Fail(protocol.Errorf(protocol.CodeRejected, "refused as it is"))
		}
		data, _ := protocol.Marshal(&rep)
		_ = msg.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if id, err := sessiontest.Send(ctx, m.Conn, m.Names, protocol.SubmitRequest{Task: "take me", SessionID: "taken"}); err != nil || id != "taken" {
		t.Fatalf("Send of a task taken: %q, %v", id, err)
	}
	_, err = sessiontest.Send(ctx, m.Conn, m.Names, protocol.SubmitRequest{Task: "refuse me", SessionID: "refused"})
	if protocol.CodeOf(err) != protocol.CodeRejected {
		t.Fatalf("Send of a refused task: %v (code %q), want the reply's code %q", err, protocol.CodeOf(err), protocol.CodeRejected)
	}
}
