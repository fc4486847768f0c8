package toolhost_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/executor"
	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/planner"
	"github.com/skein-mesh/skein/toolhost"
)

// The boss asks the helper through the agent tool; a refused delegation comes back as an error
// the boss's model reads and answers about.
const bossScript = `rules:
  - when: {last: "refused the task"}
    reply:
      tool_calls:
        - {name: finish, args: {accomplished: false, answer: "The helper could not take it.", reason: "the helper refused the task"}}
  - when: {last: "(?s)session_id.*four"}
    reply: {text: "The helper says the answer is four."}
  - when: {last: "ask the helper"}
    reply:
      tool_calls:
        - {name: helper, args: {task: "What is two plus two?"}}
`

const helperScript = `rules:
  - when: {last: "two plus two"}
    reply: {text: "four"}
`

func agentConfig(t *testing.T, name, script string, maxDepth int, agents ...string) *config.Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Agent.Name = name
	cfg.Agent.MaxDepth = maxDepth
	cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.Script = "scripted", "scripted", p
	cfg.Tools.Agents = agents
	cfg.Memory.Enabled = false
	cfg.Miner.Enabled = false
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatalf("config of %s: %v", name, errs)
	}
	return cfg
}

// miniMesh runs a gateway, a planner, a toolhost offering helper to boss, and one executor per
// agent, all in process on a real embedded NATS.
func miniMesh(t *testing.T) *bustest.Mesh {
	t.Helper()
	m := bustest.Start(t)
	boss := agentConfig(t, "boss", bossScript, 3, "helper")
	helper := agentConfig(t, "helper", helperScript, 1)
	roles := bustest.RunRoles(t, m)

	h, err := toolhost.New(roles.Ctx, toolhost.Deps{Conn: roles.Connect("toolhost"), Names: m.Names, Config: boss, Logger: slog.New(slog.DiscardHandler), HostID: "agents-host"})
	if err != nil {
		t.Fatalf("toolhost: %v", err)
	}
	if got := h.Tools(); len(got) != 1 || got[0] != "helper" {
		t.Fatalf("toolhost serves %v, want [helper]", got)
	}
	roles.Go("toolhost", h.Serve)
	for _, cfg := range []*config.Config{boss, helper} {
		ex, err := executor.New(roles.Ctx, executor.Deps{Conn: roles.Connect("executor-" + cfg.Agent.Name), Names: m.Names, Config: cfg, Logger: slog.New(slog.DiscardHandler), ID: "ex-" + cfg.Agent.Name})
		if err != nil {
			t.Fatalf("executor %s: %v", cfg.Agent.Name, err)
		}
		roles.Go("executor "+cfg.Agent.Name, ex.Serve)
	}
	roles.Go("gateway", func(ctx context.Context) error {
		return gateway.Run(ctx, gateway.Deps{Conn: roles.Connect("gateway"), Names: m.Names, Config: boss, Logger: slog.New(slog.DiscardHandler)})
	})
	roles.Go("planner", func(ctx context.Context) error {
		return planner.Run(ctx, planner.Deps{Conn: roles.Connect("planner"), Names: m.Names, Config: boss, Logger: slog.New(slog.DiscardHandler), ID: "planner-test"})
	})
	return m
}

// submit sends req once its agent is registered (the executors register as they start).
func submit(t *testing.T, m *bustest.Mesh, req protocol.SubmitRequest) string {
	t.Helper()
	bustest.WaitAgent(t, m.Conn, m.Names, req.Agent)
	return sessiontest.Submit(t, m.Conn, m.Names, req)
}

func TestAgentAsTool(t *testing.T) {
	m := miniMesh(t)
	boss := submit(t, m, protocol.SubmitRequest{Agent: "boss", Task: "Please ask the helper what two plus two is."})
	evs := sessiontest.WaitEnd(t, m.Conn, m.Names, boss)

	final := sessiontest.Only(t, evs, protocol.EvFinal, "")
	if final.Outcome != protocol.OutcomeSuccess || !strings.Contains(final.Text, "four") {
		t.Fatalf("boss ended %s with %q, want success quoting the helper", final.Outcome, final.Text)
	}
	call := sessiontest.Only(t, evs, protocol.EvToolCall, "")
	if call.Tool != "helper" || call.Result == nil || !call.Result.OK {
		t.Fatalf("helper call = %+v", call)
	}
	var res struct {
		SessionID string           `json:"session_id"`
		Outcome   protocol.Outcome `json:"outcome"`
		FinalText string           `json:"final_text"`
	}
	if err := json.Unmarshal(call.Result.Result, &res); err != nil {
		t.Fatalf("helper result %s: %v", call.Result.Result, err)
	}
	if res.FinalText != "four" || res.Outcome != protocol.OutcomeSuccess || res.SessionID != toolhost.ChildSessionID(boss, call.CallID) {
		t.Fatalf("helper result = %+v", res)
	}

	kids := sessiontest.Children(t, m.Conn, m.Names, boss)
	if len(kids) != 1 || kids[0].SessionID != res.SessionID || kids[0].Agent != "helper" || kids[0].Depth != 1 {
		t.Fatalf("children of %s = %+v, want the one helper session at depth 1", boss, kids)
	}

	// The helper's tokens are the boss's, under role subagent.
	report := sessiontest.Only(t, evs, protocol.EvUsage, "").Report
	child := sessiontest.WaitEnd(t, m.Conn, m.Names, res.SessionID)
	childReport := sessiontest.Only(t, child, protocol.EvUsage, "").Report
	if report == nil || childReport == nil {
		t.Fatal("usage events carry no report")
	}
	sub := report.ByRole[protocol.RoleSubagent]
	if sub.InputTokens == 0 || sub != childReport.Usage {
		t.Fatalf("boss usage by role %+v: subagent should equal the helper's total %+v", report.ByRole, childReport.Usage)
	}
	if want := report.ByRole[protocol.RoleExecutor].Add(sub); report.Usage != want {
		t.Fatalf("boss total %+v, want executor + subagent %+v", report.Usage, want)
	}

	// The executor's call timed out, say, and the model calls again with the same call id: the
	// same child answers and no second one starts.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply, err := tools.Call(ctx, m.Conn.NC, m.Names, protocol.ToolRequest{SessionID: boss, CallID: call.CallID, Tool: "helper",
		Args: call.Args}, time.Minute)
	if err != nil || !reply.OK || reply.Usage == nil {
		t.Fatalf("retried call: %+v, %v", reply, err)
	}
	if !strings.Contains(string(reply.Result), res.SessionID) {
		t.Fatalf("retried call answered from %s, want %s", reply.Result, res.SessionID)
	}
	if kids := sessiontest.Children(t, m.Conn, m.Names, boss); len(kids) != 1 {
		t.Fatalf("after a retried call %s has %d children, want 1", boss, len(kids))
	}
	sessiontest.Only(t, sessiontest.Events(t, m.Conn, m.Names, res.SessionID), protocol.EvSessionStarted, "")
}

func TestAgentToolRefusedPastMaxDepth(t *testing.T) {
	m := miniMesh(t)
	// The boss runs as a sub-agent already (depth 1); its helper call would be depth 2, past the
	// helper's max_depth of 1.
	boss := submit(t, m, protocol.SubmitRequest{Agent: "boss", Task: "Please ask the helper what two plus two is.", Depth: 1})
	evs := sessiontest.WaitEnd(t, m.Conn, m.Names, boss)
	call := sessiontest.Only(t, evs, protocol.EvToolCall, "")
	if call.Result == nil || call.Result.OK || call.Result.Kind != protocol.ToolErrToolError ||
		!strings.Contains(call.Result.Error, "allows 1") {
		t.Fatalf("helper call past max_depth = %+v, want a tool_error naming the limit", call.Result)
	}
	// The boss could not get its answer, and says so through finish: not accomplished.
	final := sessiontest.Only(t, evs, protocol.EvIncomplete, "")
	if final.Outcome != protocol.OutcomeNotAccomplished || !strings.Contains(final.Text, "could not take it") {
		t.Fatalf("boss ended %s with %q; its model should have read the refusal and reported it", final.Outcome, final.Text)
	}
	if kids := sessiontest.Children(t, m.Conn, m.Names, boss); len(kids) != 0 {
		t.Fatalf("a refused call started %+v", kids)
	}
}

func TestAgentToolChecksArguments(t *testing.T) {
	m := miniMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range []string{`{}`, `{"task": ""}`, `{"task": "x", "extra": 1}`, `{"task": 3}`, `[]`} {
		reply, err := tools.Call(ctx, m.Conn.NC, m.Names, protocol.ToolRequest{SessionID: "s-args", CallID: "c1", Tool: "helper",
			Args: json.RawMessage(args)}, time.Minute)
		if err != nil || reply.OK || reply.Kind != protocol.ToolErrBadArgs {
			t.Errorf("args %s: %+v, %v; want invalid_arguments", args, reply, err)
		}
	}
	if kids := sessiontest.Children(t, m.Conn, m.Names, "s-args"); len(kids) != 0 {
		t.Fatalf("bad arguments started %+v", kids)
	}
}
