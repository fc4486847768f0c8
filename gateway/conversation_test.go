package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

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

// Another task under a finished session's id starts the conversation's next turn; a retried
// follow-up is a duplicate; a follow-up while the latest turn runs is refused.
func TestFollowUpStartsTheNextTurn(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "my name is Ada", SessionID: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "too soon", SessionID: "c"}); !errors.Is(err, ErrRejected) {
		t.Fatalf("follow-up while the first turn runs: %v; want rejected", err)
	}
	f.finish(t, "c")
	rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "what is my name", SessionID: "c"})
	if err != nil || rep.SessionID != "c-2" || rep.Duplicate {
		t.Fatalf("follow-up: %+v %v; want turn c-2", rep, err)
	}
	turn := f.session(t, "c-2")
	if turn.Conversation != "c" || turn.Previous != "c" || turn.Task != "what is my name" || turn.Status != protocol.StatusQueued {
		t.Fatalf("turn record %+v", turn)
	}
	if root := f.session(t, "c"); root.LastTurn != "c-2" || root.TurnCount != 2 {
		t.Fatalf("root record: last turn %q, count %d", root.LastTurn, root.TurnCount)
	}
	again, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "what is my name", SessionID: "c"})
	if err != nil || again.SessionID != "c-2" || !again.Duplicate {
		t.Fatalf("retried follow-up: %+v %v", again, err)
	}
	if n := f.taskCount(t, testAgent); n != 2 {
		t.Fatalf("%d TASKS messages; want 2", n)
	}
	f.finish(t, "c-2")
	// A follow-up may name any turn: it continues the latest.
	third, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "and my age?", SessionID: "c-2"})
	if err != nil || third.SessionID != "c-3" || f.session(t, "c-3").Previous != "c-2" {
		t.Fatalf("third turn: %+v %v", third, err)
	}

	srv := httptest.NewServer(f.gw.Handler())
	t.Cleanup(srv.Close)
	post := func(body string) (int, map[string]any) {
		resp, err := testClient.Post(srv.URL+"/v1/sessions/c/messages", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if status, out := post(`{"text": "a fourth while c-3 runs"}`); status != http.StatusUnprocessableEntity {
		t.Fatalf("HTTP follow-up while a turn runs: %d %v", status, out)
	}
	f.finish(t, "c-3")
	if status, out := post(`{"text": "a fourth"}`); status != http.StatusAccepted || out["session_id"] != "c-4" {
		t.Fatalf("HTTP follow-up: %d %v", status, out)
	}
}
