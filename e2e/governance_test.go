package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// The governance mesh: agent assistant (which may delegate to agent helper) and agent helper
// (which may delegate to assistant), each on its own executor process, two toolhosts serving the
// example tools and the test tools, one of them helper as an agent tool, the other assistant.
// The scripted model is named after a priced model so money budgets count offline.
const govAssistant = `
agent:
  name: assistant
  max_steps: 40
llm:
  provider: scripted
  model: claude-haiku-4-5
  script: assistant.script.yaml
tools:
  manifest_dirs: [$TOOLS, $TESTTOOLS]
  agents: [helper]
  max_parallel: 4
memory:
  enabled: false
`

const govHelper = `
agent:
  name: helper
  max_steps: 10
llm:
  provider: scripted
  model: claude-haiku-4-5
  script: helper.script.yaml
tools:
  manifest_dirs: [$TOOLS, $TESTTOOLS]
  agents: [assistant]
memory:
  enabled: false
`

const govAssistantScript = `
rules:
  # A give-up in plain text after a failed tool, even when asked to report through finish.
  - when: {last: "(no tool named|answered in plain text)", any: "deploy in words"}
    reply: {text: "Could not deploy."}
  - when: {last: "^deploy in words"}
    reply: {tool_calls: [{name: deploy, args: {env: prod}}]}
  # Delegates to helper, which delegates again (depth 2); a loop unless a budget stops it.
  - when: {any: "nest loop"}
    reply: {tool_calls: [{name: helper, args: {task: "nest deeper"}}]}
  - when: {last: "^my name is"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: "Nice to meet you."}}]}
  - when: {last: "^what is two plus two"}
    reply: {text: "Four."}
  - when: {last: "what is my name", any: "my name is Ada"}
    reply: {text: "Your name is Ada."}
  - when: {last: "what is my name", any: "my name is Bob"}
    reply: {text: "Your name is Bob."}
  - when: {last: "what is my name"}
    reply: {text: "I do not know your name."}
  - when: {last: "^hang direct"}
    reply: {tool_calls: [{name: hang, args: {pidfile: "$PIDS/direct.pid"}}]}
  - when: {last: "^hang cli"}
    reply: {tool_calls: [{name: hang, args: {pidfile: "$PIDS/cli.pid"}}]}
  - when: {last: "^hang chat"}
    reply: {tool_calls: [{name: hang, args: {pidfile: "$PIDS/chat.pid"}}]}
  - when: {last: "^delegate"}
    reply: {tool_calls: [{name: helper, args: {task: "say hi"}}]}
  - when: {last: "^hang parent"}
    reply: {tool_calls: [{name: helper, args: {task: "hang child"}}]}
  - when: {last: "^think slowly"}
    reply: {text: "done thinking"}
    delay_s: 60
  - when: {last: "^fan out"}
    reply:
      tool_calls:
        - {name: helper, args: {task: "say hi"}}
        - {name: helper, args: {task: "say hi again"}}
  - when: {last: "(?i)loop"}
    reply: {text: "Going round again.", tool_calls: [{name: echo, args: {text: "loop once more"}}]}
  - when: {last: "(slept|^crawl)"}
    reply: {tool_calls: [{name: slow, args: {seconds: 0.5}}]}
  - when: {last: "^give up"}
    reply: {tool_calls: [{name: finish, args: {accomplished: false, answer: "Could not deploy.", reason: "no credentials"}}]}
  - when: {last: "(?i)hi"}
    reply: {text: "said hi"}
`

const govHelperScript = `
rules:
  - when: {last: "^nest deeper"}
    reply: {tool_calls: [{name: assistant, args: {task: "say hi from below"}}]}
  - when: {last: "^hang child"}
    reply: {tool_calls: [{name: hang, args: {pidfile: "$PIDS/child.pid"}}]}
  - when: {last: "say hi"}
    reply: {text: "hi"}
`

type govMesh struct {
	url, assistantCfg, pids string
	c                       *bus.Conn
}

func startGovMesh(t *testing.T) *govMesh {
	t.Helper()
	root := devtest.RepoRoot(t)
	dir := reachableTempDir(t)
	// The tools write their pids here: a folder they see (not in /tmp, each call may have its
	// own) and may write (they run as other users when the tests run as root).
	pids := devtest.SharedDir(t)
	repl := strings.NewReplacer("$TOOLS", filepath.Join(root, "examples", "tools"),
		"$TESTTOOLS", filepath.Join(root, "e2e", "testdata", "tools"), "$PIDS", pids)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(repl.Replace(body)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("assistant.script.yaml", govAssistantScript)
	write("helper.script.yaml", govHelperScript)
	acfg := write("assistant.yaml", govAssistant)
	hcfg := write("helper.yaml", govHelper)
	url := natsServer(t)
	c := connect(t, url)
	env := []string{"SKEIN_HOME=" + t.TempDir()}
	start(t, env, "toolhost", "toolhost", "--nats", url, "--config", acfg)
	// A second toolhost serves assistant as helper's agent tool (a tree two levels deep).
	start(t, env, "toolhost-helper", "toolhost", "--nats", url, "--config", hcfg)
	start(t, env, "executor-assistant", "executor", "--nats", url, "--config", acfg)
	start(t, env, "executor-helper", "executor", "--nats", url, "--config", hcfg)
	start(t, env, "planner", "planner", "--nats", url, "--config", acfg)
	start(t, env, "gateway", "gateway", "--nats", url, "--config", acfg)
	bustest.WaitAgent(t, c, meshNames, "assistant")
	bustest.WaitAgent(t, c, meshNames, "helper")
	bustest.WaitPullers(t, c, meshNames, "assistant", 1)
	bustest.WaitPullers(t, c, meshNames, "helper", 1)
	bustest.WaitTools(t, c, meshNames, "hang", "slow", "echo")
	return &govMesh{url: url, assistantCfg: acfg, pids: pids, c: c}
}

func (m *govMesh) submit(t *testing.T, task string, budget *protocol.Budget) string {
	t.Helper()
	return sessiontest.Submit(t, m.c, meshNames, protocol.SubmitRequest{Task: task, Agent: "assistant", Caller: "e2e", Budget: budget})
}

// readPIDs waits for a hang tool's pid file: the tool and its grandchild are running.
func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	var out []int
	poll.Eventually(t, sessiontest.EndTimeout, "the hang tool to start", func() error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out = out[:0]
		for _, f := range strings.Fields(string(data)) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("pid file %s: %q", path, data)
			}
			out = append(out, n)
		}
		return nil
	})
	return out
}

// alive reports whether pid runs (a zombie waiting for its reaper counts as gone).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// waitGone checks that every one of pids ends within the time a cancel has to end a session's
// tool processes, and kills those that do not.
func waitGone(t *testing.T, pids []int, within time.Duration) {
	t.Helper()
	running := func() []int {
		var out []int
		for _, pid := range pids {
			if alive(pid) {
				out = append(out, pid)
			}
		}
		return out
	}
	if err := poll.Wait(within, func() error {
		if left := running(); len(left) > 0 {
			return fmt.Errorf("processes %v", left)
		}
		return nil
	}); err != nil {
		for _, pid := range running() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("%v still run %s after the cancel", err, within)
	}
}

// ending returns the session's terminal event and its usage event.
func ending(t *testing.T, session string, evs []protocol.Event) (protocol.Event, protocol.Event) {
	t.Helper()
	var term, usage protocol.Event
	for _, ev := range evs {
		switch {
		case ev.Type.Terminal():
			term = ev
		case ev.Type == protocol.EvUsage:
			usage = ev
		}
	}
	if term.Type == "" || usage.Type == "" {
		t.Fatalf("%s: no terminal or usage event", session)
	}
	return term, usage
}

func hasEvent(evs []protocol.Event, typ protocol.EventType) *protocol.Event {
	for i := range evs {
		if evs[i].Type == typ {
			return &evs[i]
		}
	}
	return nil
}

type cancelCLIReply struct {
	SessionID string   `json:"session_id"`
	Status    string   `json:"status"`
	Outcome   string   `json:"outcome"`
	NoOp      bool     `json:"no_op"`
	Children  []string `json:"children"`
}

// skeinCancelQuiet cancels through the gateway subject, as `skein cancel` does, without
// starting a CLI process (the benchmark measures the mesh, not process start).
func (m *govMesh) skeinCancelQuiet(t *testing.T, session string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var rep protocol.CancelReply
	req := protocol.CancelRequest{SessionID: session, By: "bench"}
	if err := bus.Request(ctx, m.c.NC, protocol.NewNames("").Cancel(), &req, &rep, 5*time.Second); err != nil || rep.Error != "" {
		t.Fatalf("cancel %s: %v %s", session, err, rep.Error)
	}
}

// skeinCancel runs `skein cancel --json` and decodes its reply.
func (m *govMesh) skeinCancel(t *testing.T, session string) cancelCLIReply {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "skein"), "cancel", "--nats", m.url, "--config", m.assistantCfg,
		"--reason", "e2e says stop", "--json", session)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("skein cancel: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var rep cancelCLIReply
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("skein cancel --json printed %q: %v", out, err)
	}
	return rep
}

// TestGovernance runs the cancel and budget cases against one real multi-process mesh.
func TestGovernance(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	m := startGovMesh(t)

	// A cancel during a long tool: the tool and its grandchild are killed, the session ends
	// cancelled within 2 s, and its trace says who cancelled it. Cancelling again is a no-op.
	t.Run("cancel during a long tool", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		id := m.submit(t, "hang direct", nil)
		pids := readPIDs(t, filepath.Join(m.pids, "direct.pid"))
		began := time.Now()
		rep := m.skeinCancel(t, id)
		if rep.Status != protocol.CancelStatusCancelling || rep.NoOp {
			t.Fatalf("cancel reply %+v", rep)
		}
		evs, err := sessiontest.Follow(ctx, m.c, meshNames, id)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		term, usage := ending(t, id, evs)
		if term.Outcome != protocol.OutcomeCancelled || usage.Outcome != protocol.OutcomeCancelled {
			t.Fatalf("outcome %s / %s, want cancelled", term.Outcome, usage.Outcome)
		}
		if took > 2*time.Second {
			t.Errorf("session ended %s after the cancel; want within 2s", took)
		}
		ce := hasEvent(evs, protocol.EvCancel)
		if ce == nil || !strings.HasPrefix(ce.Attrs["by"], "cli ") || ce.Reason != "e2e says stop" {
			t.Fatalf("trace does not say who cancelled: %+v", ce)
		}
		if !strings.Contains(term.Reason, "cancelled by cli ") {
			t.Errorf("terminal reason %q does not name the canceller", term.Reason)
		}
		waitGone(t, pids, 2*time.Second)
		t.Logf("cancel to session end: %s", took)

		again := m.skeinCancel(t, id)
		if again.Status != protocol.CancelStatusAlreadyFinished || !again.NoOp || again.Outcome != string(protocol.OutcomeCancelled) {
			t.Fatalf("second cancel %+v; want a no-op naming the outcome", again)
		}
	})

	// A slow model call is aborted by the cancel, not waited for.
	t.Run("cancel during a model call", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		id := m.submit(t, "think slowly", nil)
		// The executor offers the step its tools (the tools event) and then calls the model: once
		// the event is in the trace, the 60 s call is running.
		poll.True(t, sessiontest.EndTimeout, "the model call to start", func() bool {
			return hasEvent(sessiontest.Events(t, m.c, meshNames, id), protocol.EvTools) != nil
		})
		began := time.Now()
		m.skeinCancel(t, id)
		evs, err := sessiontest.Follow(ctx, m.c, meshNames, id)
		if err != nil {
			t.Fatal(err)
		}
		term, _ := ending(t, id, evs)
		if term.Outcome != protocol.OutcomeCancelled {
			t.Fatalf("outcome %s, want cancelled", term.Outcome)
		}
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("session ended %s after the cancel; want within 2s", took)
		}
	})

	// Cancelling a parent cancels the child agent session running under it, and the child's tool.
	t.Run("cancel a parent with a running child", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		id := m.submit(t, "hang parent", nil)
		pids := readPIDs(t, filepath.Join(m.pids, "child.pid"))
		began := time.Now()
		rep := m.skeinCancel(t, id)
		if len(rep.Children) != 1 {
			t.Fatalf("cancel reply %+v; want one child cancelled with it", rep)
		}
		child := rep.Children[0]
		for _, s := range []string{id, child} {
			evs, err := sessiontest.Follow(ctx, m.c, meshNames, s)
			if err != nil {
				t.Fatal(err)
			}
			term, _ := ending(t, s, evs)
			if term.Outcome != protocol.OutcomeCancelled {
				t.Fatalf("%s: outcome %s, want cancelled", s, term.Outcome)
			}
		}
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("parent and child ended %s after the cancel; want within 2s", took)
		}
		waitGone(t, pids, 2*time.Second)
	})

	// A looping session is stopped by each kind of budget, and says which limit and what it did.
	t.Run("budgets", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cases := []struct {
			task   string
			budget protocol.Budget
			limit  string
			check  func(t *testing.T, models, toolsOK int)
		}{
			{"loop turns", protocol.Budget{MaxTurns: 3}, protocol.LimitTurns, func(t *testing.T, models, _ int) {
				if models != 3 {
					t.Errorf("%d model calls; want exactly 3", models)
				}
			}},
			{"loop tools", protocol.Budget{MaxToolCalls: 2}, protocol.LimitToolCalls, func(t *testing.T, _, toolsOK int) {
				if toolsOK != 2 {
					t.Errorf("%d tool calls ran; want exactly 2", toolsOK)
				}
			}},
			{"loop input", protocol.Budget{MaxInputTokens: 1500}, protocol.LimitInputTokens, nil},
			{"loop output", protocol.Budget{MaxOutputTokens: 40}, protocol.LimitOutputTokens, nil},
			{"loop money", protocol.Budget{MaxUSD: 0.002}, protocol.LimitUSD, nil},
			{"crawl deadline", protocol.Budget{DeadlineS: 2}, protocol.LimitDeadline, nil},
			{"fan out", protocol.Budget{MaxFanout: 1}, protocol.LimitFanout, nil},
			// The child's call at depth 2 is refused, and the limit, reached in the child, stops
			// the looping root too: one delegation, not one per turn.
			{"nest loop", protocol.Budget{MaxDepth: 1}, protocol.LimitDepth, func(t *testing.T, models, _ int) {
				if models != 1 {
					t.Errorf("%d model calls of the root; want 1 (the limit reached below stops it)", models)
				}
			}},
		}
		ids := make([]string, len(cases))
		for i, c := range cases {
			b := c.budget
			ids[i] = m.submit(t, c.task, &b)
		}
		for i, c := range cases {
			t.Run(c.limit, func(t *testing.T) {
				evs, err := sessiontest.Follow(ctx, m.c, meshNames, ids[i])
				if err != nil {
					t.Fatal(err)
				}
				term, usage := ending(t, ids[i], evs)
				if term.Outcome != protocol.OutcomeBudgetExceeded {
					t.Fatalf("outcome %s (%s); want budget_exceeded", term.Outcome, term.Reason)
				}
				if !strings.Contains(term.Reason, c.limit) || !strings.Contains(term.Reason, "done until then") {
					t.Errorf("reason %q does not name %s and what was done", term.Reason, c.limit)
				}
				models, toolsOK := 0, 0
				for _, ev := range evs {
					switch {
					case ev.Type == protocol.EvModelCall && ev.Role == protocol.RoleExecutor:
						models++
					case ev.Type == protocol.EvToolCall && ev.Result != nil && ev.Result.OK:
						toolsOK++
					}
				}
				if c.check != nil {
					c.check(t, models, toolsOK)
				}
				// The trace's budget event says which limit, the figure reached, the limit and
				// what was done (the root's own budget here, so its scope is the root).
				be := hasEvent(evs, protocol.EvBudget)
				if be == nil {
					t.Fatal("no budget event in the trace")
				}
				if be.Attrs["limit"] != c.limit || be.Attrs["reached"] == "" || be.Attrs["max"] == "" ||
					be.Attrs["scope"] != ids[i] || !strings.Contains(be.Attrs["done"], "model turn(s)") {
					t.Errorf("budget event attrs %v; want limit %s, reached, max, scope %s and done", be.Attrs, c.limit, ids[i])
				}
				if c.limit == protocol.LimitDepth && (be.Attrs["reached"] != "2" || be.Attrs["max"] != "1") {
					t.Errorf("max_depth event attrs %v; want reached 2 of 1", be.Attrs)
				}
				if models > 30 {
					t.Errorf("%d model calls: the budget did not stop the loop early", models)
				}
				t.Logf("%s: %d model calls, %d tool calls, usage in %d out %d; %s", c.limit, models, toolsOK,
					usage.Report.InputTokens, usage.Report.OutputTokens, term.Reason)
			})
		}
	})

	// The child runs on the helper's executor; its tokens are charged to the root's ledger entry,
	// and the root, under its limit before the child ran, stops at its next check.
	t.Run("child's spending stops its root", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		input := func(u *protocol.Usage) int64 {
			return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
		}
		// A free run measures the root's first call and the child's.
		free, err := sessiontest.Follow(ctx, m.c, meshNames, m.submit(t, "delegate a greeting", nil))
		if err != nil {
			t.Fatal(err)
		}
		var root, child int64
		for _, ev := range free {
			switch {
			case ev.Type == protocol.EvModelCall && ev.Role == protocol.RoleExecutor && root == 0:
				root = input(ev.Usage)
			case ev.Type == protocol.EvModelCall && ev.Role == protocol.RoleSubagent:
				child += input(ev.Usage)
			}
		}
		if root == 0 || child == 0 {
			t.Fatalf("free run: root's first call %d tokens, child %d", root, child)
		}
		// Room for the root's first call, not for the child's on top.
		id := m.submit(t, "delegate a greeting", &protocol.Budget{MaxInputTokens: root + 1})
		evs, err := sessiontest.Follow(ctx, m.c, meshNames, id)
		if err != nil {
			t.Fatal(err)
		}
		term, _ := ending(t, id, evs)
		if term.Outcome != protocol.OutcomeBudgetExceeded {
			t.Fatalf("root outcome %s (%s); want budget_exceeded", term.Outcome, term.Reason)
		}
		be := hasEvent(evs, protocol.EvBudget)
		want := map[string]string{"limit": protocol.LimitInputTokens, "reached": strconv.FormatInt(root+child, 10),
			"max": strconv.FormatInt(root+1, 10), "scope": id}
		for k, v := range want {
			if be == nil || be.Attrs[k] != v {
				t.Fatalf("root's budget event %+v; want %v (the child's tokens counted)", be, want)
			}
		}
		var childID string
		for _, ev := range evs {
			if ev.Type == protocol.EvModelCall && ev.Role == protocol.RoleSubagent {
				childID = ev.Attrs["child_session"]
			}
		}
		cevs := sessiontest.Events(t, m.c, meshNames, childID)
		if cterm, _ := ending(t, childID, cevs); cterm.Outcome != protocol.OutcomeSuccess {
			t.Fatalf("child %s ended %s; want success (it ran before the limit was reached)", childID, cterm.Outcome)
		}
		started := hasEvent(cevs, protocol.EvStepStarted)
		if started == nil || started.Attrs["executor"] == hasEvent(evs, protocol.EvStepStarted).Attrs["executor"] {
			t.Fatalf("the child did not run on another executor than its root")
		}
	})

	// trace tree --json shows the session, its step and its child agent session with figures.
	t.Run("trace tree with a child", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		id := m.submit(t, "delegate a greeting", nil)
		if _, err := sessiontest.Follow(ctx, m.c, meshNames, id); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(filepath.Join(binaries(t), "skein"), "trace", "tree", "--nats", m.url, "--config", m.assistantCfg, "--json", id).Output()
		if err != nil {
			t.Fatalf("skein trace tree: %v", err)
		}
		type node struct {
			SessionID string   `json:"session_id"`
			Agent     string   `json:"agent"`
			Outcome   string   `json:"outcome"`
			Turns     int      `json:"turns"`
			WallTimeS float64  `json:"wall_time_s"`
			CostUSD   *float64 `json:"cost_usd"`
			Usage     struct {
				InputTokens int64 `json:"input_tokens"`
			} `json:"usage"`
			Steps []struct {
				StepID  string `json:"step_id"`
				Outcome string `json:"outcome"`
				Turns   int    `json:"turns"`
			} `json:"steps"`
			Children []json.RawMessage `json:"children"`
		}
		var root, child node
		if err := json.Unmarshal(out, &root); err != nil {
			t.Fatalf("trace tree --json printed %q: %v", out, err)
		}
		if root.SessionID != id || root.Outcome != "success" || root.Turns != 2 || len(root.Steps) != 1 || root.Usage.InputTokens == 0 ||
			root.CostUSD == nil || *root.CostUSD <= 0 || root.WallTimeS <= 0 || len(root.Children) != 1 {
			t.Fatalf("root node %s", out)
		}
		if err := json.Unmarshal(root.Children[0], &child); err != nil {
			t.Fatal(err)
		}
		if child.Agent != "helper" || child.Outcome != "success" || child.Turns != 1 || len(child.Steps) != 1 || child.Usage.InputTokens == 0 {
			t.Fatalf("child node %s", root.Children[0])
		}
		text, err := exec.Command(filepath.Join(binaries(t), "skein"), "trace", "tree", "--nats", m.url, "--config", m.assistantCfg, id).Output()
		if err != nil || !strings.Contains(string(text), child.SessionID) || !strings.Contains(string(text), "└─") {
			t.Fatalf("trace tree text: %v\n%s", err, text)
		}
		t.Logf("\n%s", text)
	})

	// A three-turn conversation: each turn is a session of its own, and the third reads the first.
	t.Run("conversation", func(t *testing.T) {
		run := func(task string) (string, string) {
			out, err := exec.Command(filepath.Join(binaries(t), "skein"), "run", "--nats", m.url, "--config", m.assistantCfg,
				"--json", "--session-id", "conv-1", task).Output()
			if err != nil {
				t.Fatalf("skein run %q: %v\n%s", task, err, out)
			}
			var res struct {
				SessionID string `json:"session_id"`
				FinalText string `json:"final_text"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("%q: %v", out, err)
			}
			return res.SessionID, res.FinalText
		}
		want := [][3]string{
			{"my name is Ada", "conv-1", "Nice to meet you."},
			{"what is two plus two", "conv-1-2", "Four."},
			{"what is my name", "conv-1-3", "Your name is Ada."},
		}
		for _, w := range want {
			if id, text := run(w[0]); id != w[1] || text != w[2] {
				t.Fatalf("turn %q: session %s answer %q; want %s %q", w[0], id, text, w[1], w[2])
			}
		}
		evs := sessiontest.Events(t, m.c, meshNames, "conv-1-3")
		var calls []protocol.Event
		for _, ev := range evs {
			if ev.Type == protocol.EvModelCall {
				calls = append(calls, ev)
			}
		}
		if d := hasEvent(evs, protocol.EvDecision); d == nil || !strings.Contains(d.Text, "continuing the conversation of conv-1-2") {
			t.Fatalf("third turn does not say it continues the second: %+v", d)
		}
		if len(calls) != 1 {
			t.Fatalf("third turn made %d model calls", len(calls))
		}

		// The same over HTTP-less chat: stdin in, answers out.
		cmd := exec.Command(filepath.Join(binaries(t), "skein"), "chat", "--nats", m.url, "--config", m.assistantCfg)
		cmd.Stdin = strings.NewReader("my name is Bob\nwhat is my name\n/usage\n")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("skein chat: %v\n%s", err, stderr.String())
		}
		if !strings.Contains(stdout.String(), "assistant> Your name is Bob.") || !strings.Contains(stderr.String(), "2 turn(s)") {
			t.Fatalf("chat printed:\n%s\n-- stderr --\n%s", stdout.String(), stderr.String())
		}
	})

	// /cancel in skein chat stops the running turn (its tool is killed), and the chat goes on.
	t.Run("chat /cancel", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "skein"), "chat", "--nats", m.url, "--config", m.assistantCfg)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintln(stdin, "hang chat"); err != nil {
			t.Fatal(err)
		}
		pids := readPIDs(t, filepath.Join(m.pids, "chat.pid"))
		if _, err := fmt.Fprintln(stdin, "/cancel\nwhat is two plus two"); err != nil {
			t.Fatal(err)
		}
		waitGone(t, pids, 2*time.Second)
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("skein chat: %v\n%s", err, stderr.String())
		}
		for _, want := range []string{"cancelling turn", "(cancelled · turn"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("chat stderr lacks %q:\n%s", want, stderr.String())
			}
		}
		if !strings.Contains(stdout.String(), "assistant> Four.") {
			t.Errorf("the turn after the cancelled one did not run:\n%s\n-- stderr --\n%s", stdout.String(), stderr.String())
		}
	})

	// skein run --budget: the flag's budget stops the loop; a bad one is refused before anything runs.
	t.Run("run --budget", func(t *testing.T) {
		cmd := exec.Command(filepath.Join(binaries(t), "skein"), "run", "--nats", m.url, "--config", m.assistantCfg, "--json",
			"--budget", "max_turns=2", "--budget", "max_usd=5", "loop via the CLI")
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("skein run --budget: %v; want exit 1\n%s", err, out)
		}
		var res struct {
			Outcome string `json:"outcome"`
			Reason  string `json:"reason"`
		}
		if err := json.Unmarshal(out, &res); err != nil || res.Outcome != "budget_exceeded" || !strings.Contains(res.Reason, "max_turns reached: 2 of 2") {
			t.Fatalf("result %s (%v); want budget_exceeded at max_turns 2", out, err)
		}
		bad := exec.Command(filepath.Join(binaries(t), "skein"), "run", "--nats", m.url, "--config", m.assistantCfg, "--budget", "colour=red", "loop")
		msg, err := bad.CombinedOutput()
		if !errors.As(err, &ee) || ee.ExitCode() != protocol.ExitUsage || !strings.Contains(string(msg), "max_usd") {
			t.Fatalf("bad --budget: %v %s; want exit %d (usage) listing the keys", err, msg, protocol.ExitUsage)
		}
	})

	// A model that gives up through finish: outcome not_accomplished, exit status 1.
	t.Run("give-up answer exits non-zero", func(t *testing.T) {
		cmd := exec.Command(filepath.Join(binaries(t), "skein"), "run", "--nats", m.url, "--config", m.assistantCfg, "--json", "give up on the deploy")
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("skein run: %v; want exit 1", err)
		}
		var res struct {
			Outcome   string `json:"outcome"`
			FinalText string `json:"final_text"`
			Reason    string `json:"reason"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("skein run --json printed %q: %v", out, err)
		}
		if res.Outcome != string(protocol.OutcomeNotAccomplished) || res.FinalText != "Could not deploy." || !strings.Contains(res.Reason, "no credentials") {
			t.Fatalf("result %+v; want not_accomplished with the answer and the reason", res)
		}
	})

	// A model that gives up in plain text after a failed tool, and does not report through finish
	// when asked: not a success, exit status 1.
	t.Run("plain-text give-up exits non-zero", func(t *testing.T) {
		cmd := exec.Command(filepath.Join(binaries(t), "skein"), "run", "--nats", m.url, "--config", m.assistantCfg, "--json", "deploy in words")
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("skein run: %v; want exit 1\n%s", err, out)
		}
		var res struct {
			SessionID string `json:"session_id"`
			Outcome   string `json:"outcome"`
			FinalText string `json:"final_text"`
			Reason    string `json:"reason"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("skein run --json printed %q: %v", out, err)
		}
		if res.Outcome != string(protocol.OutcomeNotAccomplished) || res.FinalText != "Could not deploy." || !strings.Contains(res.Reason, "without reporting through finish") {
			t.Fatalf("result %+v; want not_accomplished with the answer and why", res)
		}
		evs := sessiontest.Events(t, m.c, meshNames, res.SessionID)
		asked := false
		for _, ev := range evs {
			asked = asked || ev.Type == protocol.EvDecision && strings.Contains(ev.Text, "report through finish")
		}
		if !asked {
			t.Fatal("the trace does not show the model was asked to report through finish")
		}
	})

	// Ctrl-C in `skein run` cancels the session it started; --json prints outcome cancelled.
	t.Run("ctrl-c in skein run", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "skein"), "run", "--nats", m.url, "--config", m.assistantCfg, "--json", "hang cli")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids := readPIDs(t, filepath.Join(m.pids, "cli.pid"))
		began := time.Now()
		_ = cmd.Process.Signal(syscall.SIGINT)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("skein run after Ctrl-C: %v; want exit 1\nstderr: %s", err, stderr.String())
		}
		var res struct {
			Outcome string `json:"outcome"`
			Reason  string `json:"reason"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.Outcome != "cancelled" {
			t.Fatalf("skein run --json printed %q (%v); want outcome cancelled\nstderr: %s", stdout.String(), err, stderr.String())
		}
		if took := time.Since(began); took > 3*time.Second {
			t.Errorf("skein run left %s after Ctrl-C", took)
		}
		waitGone(t, pids, 2*time.Second)
	})
}
