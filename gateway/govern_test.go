package gateway

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/gateway/gatewaytest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A cancel marks the session and its children, broadcasts a notice per session, refuses new
// children, and is a no-op (saying how it ended) once the session is done.
func TestCancelTreeAndNoOpWhenFinished(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	notices := make(chan string, 10)
	sub, err := f.mesh.Conn.NC.Subscribe(f.mesh.Names.CancelNoticeAll(), func(m *nats.Msg) {
		var n protocol.CancelNotice
		if protocol.Unmarshal(m.Data, &n) == nil {
			notices <- n.SessionID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	budget := protocol.Budget{DeadlineS: 60, MaxTurns: 5}
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Agent: testAgent, Task: "root task", SessionID: "root", Budget: &budget}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Agent: testAgent, Task: "child task", SessionID: "child", Parent: "root", Depth: 1}); err != nil {
		t.Fatal(err)
	}
	root, child := f.session(t, "root"), f.session(t, "child")
	if len(root.Children) != 1 || root.Children[0] != "child" || child.Root != "root" {
		t.Fatalf("lineage not recorded: root children %v, child root %q", root.Children, child.Root)
	}
	if root.Budget == nil || root.Budget.MaxTurns != 5 || root.Deadline.IsZero() || !child.Deadline.Equal(root.Deadline) {
		t.Fatalf("budget and deadline: root %+v %v, child deadline %v", root.Budget, root.Deadline, child.Deadline)
	}

	rep, err := f.gw.Cancel(ctx, protocol.CancelRequest{SessionID: "root", By: "ada", Reason: "wrong task"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != protocol.CancelStatusCancelling || rep.NoOp || len(rep.Children) != 1 {
		t.Fatalf("reply %+v", rep)
	}
	for _, id := range []string{"root", "child"} {
		if s := f.session(t, id); s.Cancel == nil || s.Cancel.By != "ada" {
			t.Fatalf("%s not marked cancelled: %+v", id, s.Cancel)
		}
	}
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case id := <-notices:
			got[id] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("notices received for %v; want root and child", got)
		}
	}
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Agent: testAgent, Task: "late child", SessionID: "late", Parent: "root", Depth: 1}); !errors.Is(err, ErrRejected) {
		t.Fatalf("child of a cancelled parent: %v; want rejected", err)
	}
	again, err := f.gw.Cancel(ctx, protocol.CancelRequest{SessionID: "root", By: "bob"})
	if err != nil || again.Status != protocol.CancelStatusAlreadyCancelled || !again.NoOp {
		t.Fatalf("second cancel: %+v %v", again, err)
	}

	// A finished session: nothing changes, and the reply says how it ended.
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Agent: testAgent, Task: "done task", SessionID: "done"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.gw.updateSession(ctx, "done", func(s *protocol.Session) (bool, error) {
		s.Status, s.Outcome = protocol.StatusDone, protocol.OutcomeSuccess
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	fin, err := f.gw.Cancel(ctx, protocol.CancelRequest{SessionID: "done", By: "ada"})
	if err != nil || fin.Status != protocol.CancelStatusAlreadyFinished || !fin.NoOp || fin.Outcome != protocol.OutcomeSuccess {
		t.Fatalf("cancel of a finished session: %+v %v", fin, err)
	}
	if s := f.session(t, "done"); s.Cancel != nil {
		t.Fatal("a finished session was marked cancelled")
	}
	if _, err := f.gw.Cancel(ctx, protocol.CancelRequest{SessionID: "nobody"}); ErrorCode(err) != protocol.CodeNotFound {
		t.Fatalf("unknown session: %v (code %s), want not_found", err, ErrorCode(err))
	}
}

func TestHTTPCancel(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	if status, out := postTask(t, srv, `{"task": "Greet Ada", "session_id": "h-1", "budget": {"max_usd": 0.5}}`); status != http.StatusAccepted {
		t.Fatalf("status %d %v", status, out)
	}
	if s := f.session(t, "h-1"); s.Budget == nil || s.Budget.MaxUSD != 0.5 {
		t.Fatalf("HTTP budget not applied: %+v", s.Budget)
	}
	post := func(path, body string) (int, map[string]any) {
		var out map[string]any
		return gatewaytest.PostJSON(t, srv, path, body, &out), out
	}
	status, out := post("/v1/sessions/h-1/cancel", `{"reason": "changed my mind"}`)
	if status != http.StatusOK || out["status"] != protocol.CancelStatusCancelling {
		t.Fatalf("cancel: %d %v", status, out)
	}
	if s := f.session(t, "h-1"); s.Cancel == nil || s.Cancel.Reason != "changed my mind" {
		t.Fatalf("not marked: %+v", s.Cancel)
	}
	if status, _ := post("/v1/sessions/nope/cancel", ""); status != http.StatusNotFound {
		t.Fatalf("unknown session: %d", status)
	}
	if status, _ := post("/v1/sessions/h-1/cancel", `{"colour": 1}`); status != http.StatusBadRequest {
		t.Fatalf("bad body: %d", status)
	}
}
