package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/executor"
	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/gateway/gatewaytest"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/trace"
	"github.com/skein-mesh/skein/planner"
)

// The scripted model answers each message from the whole conversation it is shown: a rule with
// times: 1 is used up once its reply is in the transcript, so the second "yes" of a conversation
// gets the second answer; "what have I said" is answered from the turns the transcript holds.
const chatScript = `rules:
  - when: {last: "^yes$"}
    reply: {text: "First yes."}
    times: 1
  - when: {last: "^yes$"}
    reply: {text: "Second yes."}
  - when: {last: "what have I said", any: "(?s)one.*two.*three.*four"}
    reply: {text: "You said one, two, three and four."}
  - when: {last: "what have I said", any: "(?s)one.*two"}
    reply: {text: "You said one and two."}
  - reply: {text: "Noted."}
`

// chat is a gateway, a planner and an executor of one scripted agent, in process on a real NATS.
type chat struct {
	mesh *bustest.Mesh
	gw   *gateway.Gateway
}

func startChat(t *testing.T) *chat {
	t.Helper()
	m := bustest.Start(t)
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(chatScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Agent.Name = testAgent
	cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.Script = "scripted", "scripted", script
	cfg.Memory.Enabled, cfg.Miner.Enabled = false, false
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	roles := bustest.RunRoles(t, m)
	ex, err := executor.New(roles.Ctx, executor.Deps{Conn: roles.Connect("executor"), Names: m.Names, Config: cfg, Logger: logger, ID: "ex-chat"})
	if err != nil {
		t.Fatal(err)
	}
	roles.Go("executor", ex.Serve)
	roles.Go("planner", func(ctx context.Context) error {
		return planner.Run(ctx, planner.Deps{Conn: roles.Connect("planner"), Names: m.Names, Config: cfg, Logger: logger, ID: "planner-chat"})
	})
	gw, err := gateway.New(roles.Ctx, gateway.Deps{Conn: roles.Connect("gateway"), Names: m.Names, Config: cfg, Logger: logger, HTTPToken: gatewaytest.Token})
	if err != nil {
		t.Fatal(err)
	}
	return &chat{mesh: m, gw: gw}
}

// send submits one message as skein chat does, retried by the caller with the same turn id.
func (c *chat) send(t *testing.T, session, text, turn string) protocol.SubmitReply {
	t.Helper()
	rep, err := c.gw.Submit(testCtx(t), protocol.SubmitRequest{SessionID: session, Task: text, TurnID: turn, Caller: "test"})
	if err != nil {
		t.Fatalf("send %q to %s: %v", text, session, err)
	}
	return rep
}

// answer waits for a turn to end and returns its answer and its usage events.
func (c *chat) answer(t *testing.T, session string) (string, []protocol.Event) {
	t.Helper()
	evs := sessiontest.WaitEnd(t, c.mesh.Conn, c.mesh.Names, session)
	var final string
	for _, ev := range evs {
		if ev.Type.Terminal() {
			final = ev.Text
		}
	}
	return final, sessiontest.Of(evs, protocol.EvUsage, "")
}

// "yes" and then "yes" again are two turns, each answered; the second message's submit tried
// again with its turn id is that same turn, run once and counted once.
func TestRepeatedMessageIsANewTurn(t *testing.T) {
	c := startChat(t)
	first := c.send(t, "yes-chat", "yes", "t1")
	if text, _ := c.answer(t, first.SessionID); text != "First yes." {
		t.Fatalf("first yes answered %q", text)
	}
	second := c.send(t, "yes-chat", "yes", "t2")
	if second.SessionID != "yes-chat-2" || second.Duplicate {
		t.Fatalf("second yes: %+v, want the new turn yes-chat-2", second)
	}
	retry := c.send(t, "yes-chat", "yes", "t2")
	if retry.SessionID != "yes-chat-2" || !retry.Duplicate {
		t.Fatalf("retried second yes: %+v, want yes-chat-2 again", retry)
	}
	text, usage := c.answer(t, second.SessionID)
	if text != "Second yes." {
		t.Fatalf("second yes answered %q: it was not run as a turn of its own", text)
	}
	if len(usage) != 1 || usage[0].Report == nil || usage[0].Report.Calls != 1 {
		t.Fatalf("second turn's usage events %+v, want one, of one model call", usage)
	}
	if root := sessiontest.Record(t, c.mesh.Conn, c.mesh.Names, "yes-chat"); root.TurnCount != 2 || root.LastTurn != "yes-chat-2" {
		t.Fatalf("the conversation counts %d turns (latest %s), want 2", root.TurnCount, root.LastTurn)
	}
}

// A fork from turn 2 of a four-turn conversation sees turns 1 and 2 only; the original
// conversation goes on as it was, with all four; the fork's tree names the turn it came from.
func TestForkSeesTheTranscriptUpToItsTurn(t *testing.T) {
	c := startChat(t)
	for i, text := range []string{"one", "two", "three", "four"} {
		rep := c.send(t, "orig", text, "o"+text)
		if text, _ := c.answer(t, rep.SessionID); text != "Noted." {
			t.Fatalf("turn %d answered %q", i+1, text)
		}
	}
	fork, err := c.gw.Submit(testCtx(t), protocol.SubmitRequest{SessionID: "branch", From: "orig-2", Task: "what have I said?", TurnID: "b1"})
	if err != nil || fork.SessionID != "branch" {
		t.Fatalf("fork: %+v %v", fork, err)
	}
	if text, _ := c.answer(t, "branch"); text != "You said one and two." {
		t.Fatalf("the fork answered %q, want only turns 1 and 2", text)
	}
	if rec := sessiontest.Record(t, c.mesh.Conn, c.mesh.Names, "branch"); rec.ForkedFrom != "orig-2" || rec.Previous != "orig-2" || rec.Conversation != "" {
		t.Fatalf("fork record %+v", rec)
	}
	if root := sessiontest.Record(t, c.mesh.Conn, c.mesh.Names, "orig"); root.TurnCount != 4 || root.LastTurn != "orig-4" {
		t.Fatalf("the original conversation changed: %d turns, latest %s", root.TurnCount, root.LastTurn)
	}
	next := c.send(t, "orig", "what have I said?", "o5")
	if text, _ := c.answer(t, next.SessionID); next.SessionID != "orig-5" || text != "You said one, two, three and four." {
		t.Fatalf("the original's next turn %s answered %q", next.SessionID, text)
	}

	srv := httptest.NewServer(c.gw.Handler())
	t.Cleanup(srv.Close)
	var tree trace.TreeNode
	if status := gatewaytest.GetJSON(t, srv, "/v1/sessions/branch/tree", &tree); status != 200 || tree.ForkedFrom != "orig-2" {
		t.Fatalf("GET tree of the fork: %d %+v", status, tree)
	}
	var out strings.Builder
	trace.PrintTree(&out, &tree)
	if !strings.Contains(out.String(), "forked from orig-2") {
		t.Fatalf("the tree does not show the fork:\n%s", out.String())
	}
	var turn trace.TreeNode
	if status := gatewaytest.GetJSON(t, srv, "/v1/sessions/orig-5/tree", &turn); status != 200 || turn.Previous != "orig-4" || turn.ForkedFrom != "" {
		t.Fatalf("GET tree of a turn: %d %+v", status, turn)
	}
}
