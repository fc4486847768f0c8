package gateway

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/gateway/gatewaytest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func (f *fixture) finish(t *testing.T, id string) {
	t.Helper()
	if _, _, err := f.gw.updateSession(testCtx(t), id, func(s *protocol.Session) (bool, error) {
		s.Status, s.Outcome = protocol.StatusDone, protocol.OutcomeSuccess
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Another message under a finished session's id starts the conversation's next turn; a message
// with the latest turn's turn id is a retry of it; the same text with another turn id is a new
// turn; a follow-up while the latest turn runs is refused.
func TestFollowUpStartsTheNextTurn(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	send := func(session, text, turn string) (protocol.SubmitReply, error) {
		return f.gw.Submit(ctx, protocol.SubmitRequest{Task: text, SessionID: session, TurnID: turn})
	}
	if _, err := send("c", "my name is Ada", "t1"); err != nil {
		t.Fatal(err)
	}
	if rep, err := send("c", "my name is Ada", "t1"); err != nil || rep.SessionID != "c" || !rep.Duplicate {
		t.Fatalf("retried first message: %+v %v; want session c again", rep, err)
	}
	if _, err := send("c", "too soon", "t2"); !errors.Is(err, ErrRejected) {
		t.Fatalf("follow-up while the first turn runs: %v; want rejected", err)
	}
	f.finish(t, "c")
	rep, err := send("c", "yes", "t3")
	if err != nil || rep.SessionID != "c-2" || rep.Duplicate {
		t.Fatalf("follow-up: %+v %v; want turn c-2", rep, err)
	}
	turn := f.session(t, "c-2")
	if turn.Conversation != "c" || turn.Previous != "c" || turn.Task != "yes" || turn.TurnID != "t3" || turn.Status != protocol.StatusQueued {
		t.Fatalf("turn record %+v", turn)
	}
	if root := f.session(t, "c"); root.LastTurn != "c-2" || root.TurnCount != 2 {
		t.Fatalf("root record: last turn %q, count %d", root.LastTurn, root.TurnCount)
	}
	// The same turn id again, naming the conversation by any of its sessions: a retry.
	for _, id := range []string{"c", "c-2"} {
		again, err := send(id, "yes", "t3")
		if err != nil || again.SessionID != "c-2" || !again.Duplicate {
			t.Fatalf("retried follow-up via %s: %+v %v", id, again, err)
		}
	}
	if n := f.taskCount(t, testAgent); n != 2 {
		t.Fatalf("%d TASKS messages; want 2", n)
	}
	// The same text with a new turn id is a new message: refused while c-2 runs, then turn c-3.
	if _, err := send("c", "yes", "t4"); !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "still running (turn c-2)") {
		t.Fatalf("a second yes while c-2 runs: %v", err)
	}
	f.finish(t, "c-2")
	third, err := send("c-2", "yes", "t4")
	if err != nil || third.SessionID != "c-3" || f.session(t, "c-3").Previous != "c-2" {
		t.Fatalf("second yes: %+v %v; want turn c-3 after c-2", third, err)
	}
	if _, err := send("c", "yes", "bad turn id"); !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "turn id") {
		t.Fatalf("a malformed turn id: %v", err)
	}

	srv := f.serve(t)
	post := func(path, body string) (int, map[string]any) {
		var out map[string]any
		return gatewaytest.PostJSON(t, srv, path, body, &out), out
	}
	if status, out := post("/v1/sessions/c/messages", `{"text": "yes"}`); status != http.StatusUnprocessableEntity {
		t.Fatalf("HTTP follow-up while a turn runs: %d %v", status, out)
	}
	f.finish(t, "c-3")
	// Without a turn id every POST is a new message: "yes" again is turn c-4, then c-5.
	if status, out := post("/v1/sessions/c/messages", `{"text": "yes"}`); status != http.StatusAccepted || out["session_id"] != "c-4" {
		t.Fatalf("HTTP follow-up: %d %v", status, out)
	}
	if status, out := post("/v1/sessions/c-4/messages", `{"text": "yes", "turn_id": "h1"}`); status != http.StatusUnprocessableEntity {
		t.Fatalf("HTTP follow-up while c-4 runs: %d %v", status, out)
	}
	f.finish(t, "c-4")
	for range 2 {
		if status, out := post("/v1/sessions/c/messages", `{"text": "yes", "turn_id": "h1"}`); status != http.StatusAccepted || out["session_id"] != "c-5" {
			t.Fatalf("HTTP follow-up with a turn id, and its retry: %d %v; want c-5 both times", status, out)
		}
	}
}

// Without a turn id, a session's own task sent again under its id is that session (what
// `skein run --session-id` has always promised); another task is the next turn.
func TestResubmitWithoutTurnIDIsTheSession(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "Greet Ada", SessionID: "r"}); err != nil {
		t.Fatal(err)
	}
	f.finish(t, "r")
	if rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "Greet Ada", SessionID: "r"}); err != nil || rep.SessionID != "r" || !rep.Duplicate {
		t.Fatalf("resubmit: %+v %v", rep, err)
	}
	if rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "Greet Bob", SessionID: "r"}); err != nil || rep.SessionID != "r-2" {
		t.Fatalf("another task: %+v %v", rep, err)
	}
}

// A submit that stopped after it recorded its turn but before the conversation named it leaves
// a turn the next message finds: a retry of it answers with it, another message waits for it.
func TestAnUnrecordedTurnIsAdopted(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "hello", SessionID: "u", TurnID: "t1"}); err != nil {
		t.Fatal(err)
	}
	f.finish(t, "u")
	// The turn u-2 as a submit that stopped before recordTurn left it.
	if _, err := f.gw.submit(ctx, protocol.SubmitRequest{Task: "next", SessionID: "u-2", TurnID: "t2", Agent: testAgent},
		turnLink{conversation: "u", previous: "u"}); err != nil {
		t.Fatal(err)
	}
	if root := f.session(t, "u"); root.LastTurn != "" {
		t.Fatalf("root names %q before the adoption", root.LastTurn)
	}
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "other", SessionID: "u", TurnID: "t3"}); !errors.Is(err, ErrRejected) ||
		!strings.Contains(err.Error(), "still running (turn u-2)") {
		t.Fatalf("another message: %v; want refused while u-2 runs", err)
	}
	if root := f.session(t, "u"); root.LastTurn != "u-2" || root.TurnCount != 2 {
		t.Fatalf("root after the adoption: %+v", root)
	}
	if rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "next", SessionID: "u", TurnID: "t2"}); err != nil || rep.SessionID != "u-2" || !rep.Duplicate {
		t.Fatalf("the retry: %+v %v", rep, err)
	}
}

// A fork is a new conversation that continues a finished turn's transcript: its record names
// the turn, its later messages are its own turns, and the forked conversation is not touched.
func TestForkStartsANewConversation(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	for i, text := range []string{"one", "two", "three"} {
		rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: text, SessionID: "o", TurnID: "o" + text})
		if err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		f.finish(t, rep.SessionID)
	}
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "what now", From: "o-2", SessionID: "f"}); err != nil {
		t.Fatal(err)
	}
	fork := f.session(t, "f")
	if fork.ForkedFrom != "o-2" || fork.Previous != "o-2" || fork.Conversation != "" || fork.Agent != testAgent {
		t.Fatalf("fork record %+v", fork)
	}
	if rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "what now", From: "o-2", SessionID: "f"}); err != nil || !rep.Duplicate {
		t.Fatalf("retried fork: %+v %v", rep, err)
	}
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "what now", From: "f", SessionID: "g"}); !errors.Is(err, ErrRejected) {
		t.Fatalf("a fork of a running turn: %v; want rejected", err)
	}
	f.finish(t, "f")
	if rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "and then", SessionID: "f", TurnID: "f2"}); err != nil || rep.SessionID != "f-2" ||
		f.session(t, "f-2").Previous != "f" {
		t.Fatalf("the fork's next turn: %+v %v", rep, err)
	}
	if root := f.session(t, "o"); root.LastTurn != "o-3" || root.TurnCount != 3 {
		t.Fatalf("the forked conversation changed: %+v", root)
	}

	srv := f.serve(t)
	var refused map[string]any
	if status := gatewaytest.PostJSON(t, srv, "/v1/sessions/o-1/fork", `{"text": "again", "session_id": "h"}`, &refused); status != http.StatusNotFound {
		t.Fatalf("fork of an unknown turn: %d %v", status, refused)
	}
	var out protocol.SubmitReply
	status := gatewaytest.PostJSON(t, srv, "/v1/sessions/o/fork", `{"text": "again", "session_id": "h"}`, &out)
	if status != http.StatusAccepted || out.SessionID != "h" || f.session(t, "h").ForkedFrom != "o" {
		t.Fatalf("HTTP fork: %d %+v", status, out)
	}
}

// A turn id and a fork's turn are ids like the others: malformed 400, too long 413, before
// anything is read with them.
func TestTurnIDsAreChecked(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	for _, c := range []struct {
		in   protocol.SubmitRequest
		code protocol.Code
	}{
		{protocol.SubmitRequest{Task: "hi", SessionID: "k", TurnID: "a b"}, protocol.CodeBadRequest},
		{protocol.SubmitRequest{Task: "hi", SessionID: "k", TurnID: strings.Repeat("t", protocol.MaxTurnID+1)}, protocol.CodeTooLarge},
		{protocol.SubmitRequest{Task: "hi", From: "a.b"}, protocol.CodeBadRequest},
		{protocol.SubmitRequest{Task: "hi", From: strings.Repeat("s", 5000)}, protocol.CodeTooLarge},
	} {
		if _, err := f.gw.Submit(ctx, c.in); ErrorCode(err) != c.code {
			t.Errorf("turn id %.20q, from %.20q: %v (code %s); want %s", c.in.TurnID, c.in.From, err, ErrorCode(err), c.code)
		}
	}
}

// A conversation whose first session id is as long as an id may be still takes follow-ups: each
// turn's id fits, and two such conversations that share the first 100 characters stay apart.
func TestFollowUpToALongestIDFits(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	prefix := strings.Repeat("a", 100)
	var turns []string
	for _, tail := range []string{strings.Repeat("b", protocol.IDSession.Max-100), strings.Repeat("c", protocol.IDSession.Max-100)} {
		id := prefix + tail
		if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "my name is Ada", SessionID: id}); err != nil {
			t.Fatal(err)
		}
		f.finish(t, id)
		rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "what is my name", SessionID: id})
		if err != nil {
			t.Fatalf("follow-up to a %d-character id: %v", len(id), err)
		}
		if err := protocol.IDSession.Check(rep.SessionID); err != nil {
			t.Fatalf("turn id %q: %v", rep.SessionID, err)
		}
		if root := f.session(t, id); root.LastTurn != rep.SessionID || f.session(t, rep.SessionID).Conversation != id {
			t.Fatalf("root's last turn %q, turn %q", root.LastTurn, rep.SessionID)
		}
		turns = append(turns, rep.SessionID)
	}
	if turns[0] == turns[1] {
		t.Fatalf("two conversations got the same turn id %q", turns[0])
	}
}
