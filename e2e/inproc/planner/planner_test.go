package planner_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/executor"
	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/planner"
)

const agent = "tester"

// rig is an in-process mesh: real NATS, gateway, planner and executor, all on the scripted model.
// The executor is registered at start but pulls work only after serve, so a test can look at
// what the planner published before any step ran.
type rig struct {
	m     *bustest.Mesh
	cfg   *config.Config
	roles *bustest.Roles
	exec  *executor.Executor
	// wire receives, in the order the server sent them, every WORK message of the agent and
	// every step result: one channel for both subjects keeps their relative order.
	wire chan *nats.Msg
}

func startRig(t *testing.T, mode, script string, tweaks ...func(*config.Config)) *rig {
	t.Helper()
	r := startRigWithoutPlanner(t, mode, script, tweaks...)
	r.startPlanner(t)
	return r
}

// startRigWithoutPlanner is startRig before its planner starts (startPlanner): for a test
// whose session must be in a given state before any planner sees its task.
func startRigWithoutPlanner(t *testing.T, mode, script string, tweaks ...func(*config.Config)) *rig {
	t.Helper()
	m := bustest.Start(t)
	path := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Agent.Name = agent
	cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.Script = "scripted", "scripted", path
	cfg.Tools.Enabled = nil
	cfg.Memory.Enabled = false
	cfg.Miner.Enabled = false
	cfg.Planner.Mode = mode
	for _, tweak := range tweaks {
		tweak(cfg)
	}

	r := &rig{m: m, cfg: cfg, roles: bustest.RunRoles(t, m), wire: make(chan *nats.Msg, 64)}
	watch := m.Connect(t, "watch")
	for _, subj := range []string{m.Names.Work(agent), m.Names.ResultAll()} {
		if _, err := watch.NC.ChanSubscribe(subj, r.wire); err != nil {
			t.Fatal(err)
		}
	}
	if err := watch.NC.Flush(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x, err := executor.New(ctx, executor.Deps{Conn: r.roles.Connect("executor"), Names: m.Names, Config: cfg,
		Logger: slog.New(slog.DiscardHandler), ID: "executor-under-test", Home: t.TempDir()})
	if err != nil {
		t.Fatalf("executor: %v", err)
	}
	r.exec = x
	r.roles.Go("gateway", func(ctx context.Context) error {
		return gateway.Run(ctx, gateway.Deps{Conn: r.roles.Connect("gateway"), Names: m.Names, Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	})
	return r
}

func (r *rig) startPlanner(t *testing.T) {
	home := t.TempDir()
	r.roles.Go("planner", func(ctx context.Context) error {
		return planner.Run(ctx, planner.Deps{Conn: r.roles.Connect("planner"), Names: r.m.Names, Config: r.cfg, Logger: slog.New(slog.DiscardHandler),
			Home: home, ID: "planner-under-test"})
	})
}

func (r *rig) serve(t *testing.T) {
	t.Helper()
	r.roles.Go("executor", r.exec.Serve)
}

func (r *rig) submit(t *testing.T, session, task string) {
	t.Helper()
	sessiontest.Submit(t, r.m.Conn, r.m.Names, protocol.SubmitRequest{SessionID: session, Agent: agent, Task: task})
}

// runToEnd submits the task, lets the executor serve and returns the session's trace once it
// has ended.
func (r *rig) runToEnd(t *testing.T, session, task string) []protocol.Event {
	t.Helper()
	r.submit(t, session, task)
	r.serve(t)
	return sessiontest.WaitEnd(t, r.m.Conn, r.m.Names, session)
}

// next returns the next WORK step or step result seen on the wire (exactly one is set).
func (r *rig) next(t *testing.T) (*protocol.Step, *protocol.StepResult) {
	t.Helper()
	select {
	case msg := <-r.wire:
		if strings.HasPrefix(msg.Subject, strings.TrimSuffix(r.m.Names.ResultAll(), ">")) {
			var res protocol.StepResult
			if err := protocol.Unmarshal(msg.Data, &res); err != nil {
				t.Fatal(err)
			}
			return nil, &res
		}
		var st protocol.Step
		if err := protocol.Unmarshal(msg.Data, &st); err != nil {
			t.Fatal(err)
		}
		return &st, nil
	case <-time.After(60 * time.Second):
		t.Fatal("nothing published on WORK or RESULTS")
		return nil, nil
	}
}

const fruitTask = "Fruit inventory: how many pieces of fruit are in the basket?"

// The executor rules match only prompts that start with the original task, so a step whose
// prompt lost the task finds no rule and fails the session.
const fruitScript = `
rules:
  - when: {system: "^skein-planner:", last: "Fruit inventory"}
    reply:
      text: |
        {"steps": [
          {"id": "s1", "instruction": "count the apples", "depends_on": []},
          {"id": "s2", "instruction": "count the pears", "depends_on": []},
          {"id": "s3", "instruction": "add the counts", "depends_on": ["s1", "s2"]}
        ]}
  - when: {last: "(?s)^Fruit inventory: how many.*Your part of the plan: add the counts.*Result of step s1:\\napples=3.*Result of step s2:\\npears=4"}
    reply: {text: "total=7"}
  - when: {last: "(?s)^Fruit inventory: how many.*Your part of the plan: count the apples"}
    reply: {text: "apples=3"}
  - when: {last: "(?s)^Fruit inventory: how many.*Your part of the plan: count the pears"}
    reply: {text: "pears=4"}
`

func TestForcePlanRunsIndependentStepsFirstAndKeepsTheTask(t *testing.T) {
	r := startRig(t, planner.ModeForce, fruitScript)
	const sid = "s-force-plan"
	r.submit(t, sid, fruitTask)

	// No executor pulls yet: the two independent steps must both be on WORK, and the session
	// must record them published, before anything has run.
	first := map[string]protocol.Step{}
	for len(first) < 2 {
		st, res := r.next(t)
		if res != nil {
			t.Fatalf("a result arrived before any executor ran: %+v", res)
		}
		first[st.StepID] = *st
	}
	for id, instr := range map[string]string{"s1": "count the apples", "s2": "count the pears"} {
		st, ok := first[id]
		if !ok {
			t.Fatalf("first steps published: %v, want s1 and s2", keys(first))
		}
		if st.Task != fruitTask || st.Instruction != instr || len(st.Context) != 0 {
			t.Fatalf("step %s = %+v", id, st)
		}
	}
	poll.Eventually(t, 30*time.Second, "the session plan to show s1 and s2 published", func() error {
		s := sessiontest.Record(t, r.m.Conn, r.m.Names, sid)
		if status(s, "s1") != protocol.StepPublished || status(s, "s2") != protocol.StepPublished {
			return fmt.Errorf("plan %+v", s.Plan)
		}
		if status(s, "s3") != protocol.StepPending {
			t.Fatalf("s3 is %s before its dependencies ran", status(s, "s3"))
		}
		return nil
	})

	r.serve(t)
	var last protocol.Step
	for last.StepID == "" {
		st, _ := r.next(t)
		if st == nil || st.StepID != "s3" {
			continue // a result, or a redelivered duplicate of s1/s2 (harmless)
		}
		last = *st
	}
	// The planner records a result before it publishes what depends on it. (The order in which
	// one watching connection sees the executor's result and the planner's step is the server's
	// fan-out order, not the planner's, so the session record is what is checked.)
	s := sessiontest.Record(t, r.m.Conn, r.m.Names, sid)
	done := map[string]string{}
	for _, p := range s.Plan {
		if p.Status == protocol.StepDone {
			done[p.StepID] = p.FinalText
		}
	}
	if done["s1"] != "apples=3" || done["s2"] != "pears=4" {
		t.Fatalf("s3 published before both results were recorded: done steps %v", done)
	}
	if last.Task != fruitTask || last.Instruction != "add the counts" {
		t.Fatalf("s3 = %+v", last)
	}
	ctxOut := map[string]string{}
	for _, c := range last.Context {
		ctxOut[c.StepID] = c.Text
	}
	if len(ctxOut) != 2 || ctxOut["s1"] != "apples=3" || ctxOut["s2"] != "pears=4" {
		t.Fatalf("s3 context = %+v", last.Context)
	}

	evs := sessiontest.WaitEnd(t, r.m.Conn, r.m.Names, sid)
	final := sessiontest.Only(t, evs, protocol.EvFinal, protocol.RolePlanner)
	if final.Outcome != protocol.OutcomeSuccess || final.Text != "total=7" {
		t.Fatalf("final = %q (%s), want total=7 (success): a step lost the task?", final.Text, final.Outcome)
	}
	plan := sessiontest.Only(t, evs, protocol.EvPlan, protocol.RolePlanner).Plan
	if len(plan) != 3 || plan[0].StepID != "s1" || plan[1].StepID != "s2" || plan[2].StepID != "s3" ||
		plan[2].Instruction != "add the counts" || strings.Join(plan[2].DependsOn, ",") != "s1,s2" {
		t.Fatalf("plan event = %+v", plan)
	}
	call := sessiontest.Only(t, evs, protocol.EvModelCall, protocol.RolePlanner)
	if call.Usage == nil || call.Usage.InputTokens == 0 || call.Usage.OutputTokens == 0 || call.Model == "" {
		t.Fatalf("planner model_call = %+v", call)
	}
	if _, ok := call.Attrs["cache_ttl"]; !ok {
		t.Fatalf("planner model_call has no cache_ttl attr: %v", call.Attrs)
	}
	if n := len(sessiontest.Of(evs, protocol.EvStepStarted, "")); n != 3 {
		t.Fatalf("%d steps started, want 3", n)
	}
	report := sessiontest.Only(t, evs, protocol.EvUsage, protocol.RolePlanner).Report
	pl := report.ByRole[protocol.RolePlanner]
	if pl.InputTokens != call.Usage.InputTokens || pl.OutputTokens != call.Usage.OutputTokens {
		t.Fatalf("usage by role planner = %+v, want the planner call's %+v", pl, *call.Usage)
	}
	if report.ByRole[protocol.RoleExecutor].InputTokens == 0 {
		t.Fatalf("usage has no executor tokens: %+v", report.ByRole)
	}
	// The planner marks the session done just after its last events.
	poll.Eventually(t, 30*time.Second, "the session done with total=7", func() error {
		if s := sessiontest.Record(t, r.m.Conn, r.m.Names, sid); s.Status != protocol.StatusDone || s.FinalText != "total=7" {
			return fmt.Errorf("session %s %q", s.Status, s.FinalText)
		}
		return nil
	})
}

// A plan that breaks the rules never fails the session: it runs as one step carrying the task,
// and a decision event says why.
func TestMalformedPlanFallsBackToOneStep(t *testing.T) {
	r := startRig(t, planner.ModeForce, `
rules:
  - when: {system: "^skein-planner:"}
    reply: {text: '{"steps":[{"id":"a","instruction":"first","depends_on":["b"]},{"id":"b","instruction":"second"}]}'}
  - when: {last: "^Summarize the weather report$"}
    reply: {text: "sunny"}
`)
	evs := r.runToEnd(t, "s-bad-plan", "Summarize the weather report")

	dec := sessiontest.Only(t, evs, protocol.EvDecision, protocol.RolePlanner)
	if dec.Attrs["decision"] != "plan_fallback" || !strings.Contains(dec.Text, "not an earlier step") {
		t.Fatalf("decision = %q %v", dec.Text, dec.Attrs)
	}
	plan := sessiontest.Only(t, evs, protocol.EvPlan, protocol.RolePlanner).Plan
	if len(plan) != 1 || plan[0].Instruction != "" || len(plan[0].DependsOn) != 0 {
		t.Fatalf("fallback plan = %+v", plan)
	}
	if final := sessiontest.Only(t, evs, protocol.EvFinal, protocol.RolePlanner); final.Text != "sunny" {
		t.Fatalf("final = %q", final.Text)
	}
	// The rejected plan still cost tokens, and they are counted.
	if u := sessiontest.Only(t, evs, protocol.EvUsage, protocol.RolePlanner).Report.ByRole[protocol.RolePlanner]; u.InputTokens == 0 {
		t.Fatalf("planner tokens not counted: %+v", u)
	}
}

// In auto mode a plan of one item is the plain single step.
func TestAutoSingleItemIsOneStep(t *testing.T) {
	r := startRig(t, planner.ModeAuto, `
rules:
  - when: {system: "^skein-planner:"}
    reply: {text: '{"steps":[{"id":"only","instruction":"say hi","depends_on":[]}]}'}
  - when: {last: "^Say hi$"}
    reply: {text: "hi"}
`)
	evs := r.runToEnd(t, "s-auto-one", "Say hi")
	plan := sessiontest.Only(t, evs, protocol.EvPlan, protocol.RolePlanner).Plan
	if len(plan) != 1 || plan[0].StepID != "s1" || plan[0].Instruction != "" {
		t.Fatalf("plan = %+v", plan)
	}
	if n := len(sessiontest.Of(evs, protocol.EvDecision, protocol.RolePlanner)); n != 0 {
		t.Fatalf("%d planner decisions for a valid one-item plan", n)
	}
	sessiontest.Only(t, evs, protocol.EvModelCall, protocol.RolePlanner)
	if final := sessiontest.Only(t, evs, protocol.EvFinal, protocol.RolePlanner); final.Text != "hi" {
		t.Fatalf("final = %q", final.Text)
	}
}

// With planning off the planner never calls a model, even when the script would plan.
func TestModeOffMakesNoPlannerCall(t *testing.T) {
	r := startRig(t, planner.ModeOff, fruitScript+`
  - when: {last: "^Fruit inventory: how many pieces of fruit are in the basket\\?$"}
    reply: {text: "seven"}
`)
	evs := r.runToEnd(t, "s-mode-off", fruitTask)
	if n := len(sessiontest.Of(evs, protocol.EvModelCall, protocol.RolePlanner)); n != 0 {
		t.Fatalf("%d planner model calls with planner.mode off", n)
	}
	plan := sessiontest.Only(t, evs, protocol.EvPlan, protocol.RolePlanner).Plan
	if len(plan) != 1 || plan[0].Instruction != "" {
		t.Fatalf("plan = %+v", plan)
	}
	if final := sessiontest.Only(t, evs, protocol.EvFinal, protocol.RolePlanner); final.Text != "seven" {
		t.Fatalf("final = %q", final.Text)
	}
	if u, ok := sessiontest.Only(t, evs, protocol.EvUsage, protocol.RolePlanner).Report.ByRole[protocol.RolePlanner]; ok {
		t.Fatalf("planner tokens with planning off: %+v", u)
	}
}

func status(s protocol.Session, step string) string {
	for _, p := range s.Plan {
		if p.StepID == step {
			return p.Status
		}
	}
	return ""
}

func keys(m map[string]protocol.Step) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
