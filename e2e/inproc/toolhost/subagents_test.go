package toolhost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/executor"
	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/planner"
	"github.com/skein-mesh/skein/toolhost"
)

// agentMesh runs a gateway, a planner, and for every agent an executor with room for one step at
// a time and a toolhost serving the agents it lists, all in process on a real embedded NATS.
func agentMesh(t *testing.T, agents ...*config.Config) *bustest.Mesh {
	t.Helper()
	m := bustest.Start(t)
	roles := bustest.RunRoles(t, m)
	for _, cfg := range agents {
		name := cfg.Agent.Name
		if len(cfg.Tools.Agents) > 0 {
			h, err := toolhost.New(roles.Ctx, toolhost.Deps{Conn: roles.Connect("toolhost"), Names: m.Names, Config: cfg, Logger: slog.New(slog.DiscardHandler), HostID: "host-" + name})
			if err != nil {
				t.Fatalf("toolhost of %s: %v", name, err)
			}
			roles.Go("toolhost of "+name, h.Serve)
		}
		ex, err := executor.New(roles.Ctx, executor.Deps{Conn: roles.Connect("executor-" + name), Names: m.Names, Config: cfg, Logger: slog.New(slog.DiscardHandler),
			ID: "ex-" + name, Concurrency: 1})
		if err != nil {
			t.Fatalf("executor %s: %v", name, err)
		}
		roles.Go("executor "+name, ex.Serve)
	}
	roles.Go("gateway", func(ctx context.Context) error {
		return gateway.Run(ctx, gateway.Deps{Conn: roles.Connect("gateway"), Names: m.Names, Config: agents[0], Logger: slog.New(slog.DiscardHandler)})
	})
	roles.Go("planner", func(ctx context.Context) error {
		return planner.Run(ctx, planner.Deps{Conn: roles.Connect("planner"), Names: m.Names, Config: agents[0], Logger: slog.New(slog.DiscardHandler), ID: "planner-test"})
	})
	return m
}

// relayScript makes an agent pass its task on to next and answer with what next said; when next
// refused or did not accomplish it, the agent reports through finish that it did not either
// ("stopped below <next>").
func relayScript(next string) string {
	stop := `{name: finish, args: {accomplished: false, answer: "stopped below ` + next + `", reason: "` + next + ` could not relay it"}}`
	return `rules:
  - when: {last: "(?s)refused the task|not_accomplished"}
    reply: {tool_calls: [` + stop + `]}
  - when: {last: "(?s)final_text"}
    reply: {text: "relayed from ` + next + `"}
  - when: {last: "(?i)relay"}
    reply:
      tool_calls:
        - {name: ` + next + `, args: {task: "relay this on"}}
`
}

// descendants lists a session's tree below it, breadth first.
func descendants(t *testing.T, m *bustest.Mesh, root string) []protocol.Session {
	t.Helper()
	var out []protocol.Session
	queue := []string{root}
	for len(queue) > 0 {
		kids := sessiontest.Children(t, m.Conn, m.Names, queue[0])
		queue = queue[1:]
		for _, k := range kids {
			out = append(out, k)
			queue = append(queue, k.SessionID)
		}
	}
	return out
}

// A→B→C with a depth limit of 2 completes on executors that run one step each: every parent
// waits for its child without holding its executor's place.
func TestAgentChainWithinDepthLimit(t *testing.T) {
	c := agentConfig(t, "c", `rules:
  - when: {last: "(?i)relay"}
    reply: {text: "c found it"}
`, 2)
	b := agentConfig(t, "b", relayScript("c"), 2, "c")
	a := agentConfig(t, "a", relayScript("b"), 2, "b")
	m := agentMesh(t, a, b, c)
	root := submit(t, m, protocol.SubmitRequest{Agent: "a", Task: "Please relay the question down."})
	evs := sessiontest.WaitEnd(t, m.Conn, m.Names, root)
	final := sessiontest.Only(t, evs, protocol.EvFinal, "")
	if final.Outcome != protocol.OutcomeSuccess || final.Text != "relayed from b" {
		t.Fatalf("a ended %s with %q, want success relayed from b", final.Outcome, final.Text)
	}
	tree := descendants(t, m, root)
	if len(tree) != 2 || tree[0].Agent != "b" || tree[0].Depth != 1 || tree[1].Agent != "c" || tree[1].Depth != 2 ||
		tree[1].Root != root {
		t.Fatalf("descendants of %s = %+v, want b at depth 1 and c at depth 2, rooted at a", root, tree)
	}
	cEvs := sessiontest.WaitEnd(t, m.Conn, m.Names, tree[1].SessionID)
	if f := sessiontest.Only(t, cEvs, protocol.EvFinal, ""); f.Text != "c found it" {
		t.Fatalf("c answered %q", f.Text)
	}
}

// An agent calling itself and back (ping → pong → ping → pong …) ends at the depth limit with a
// refusal that names it, on executors that run one step each: no hang, though ping's step at
// depth 2 runs on the executor whose one place ping's root step had.
func TestAgentCycleEndsAtTheDepthLimit(t *testing.T) {
	ping := agentConfig(t, "ping", relayScript("pong"), 2, "pong")
	pong := agentConfig(t, "pong", relayScript("ping"), 2, "ping")
	m := agentMesh(t, ping, pong)
	root := submit(t, m, protocol.SubmitRequest{Agent: "ping", Task: "Please relay the question down."})
	evs := sessiontest.WaitEnd(t, m.Conn, m.Names, root)
	// Nobody at the bottom could relay it, and each level says so: not accomplished.
	final := sessiontest.Only(t, evs, protocol.EvIncomplete, "")
	if final.Outcome != protocol.OutcomeNotAccomplished || final.Text != "stopped below pong" {
		t.Fatalf("ping ended %s with %q", final.Outcome, final.Text)
	}
	tree := descendants(t, m, root)
	if len(tree) != 2 || tree[0].Agent != "pong" || tree[1].Agent != "ping" || tree[1].Depth != 2 {
		t.Fatalf("descendants of %s = %+v, want pong at depth 1 and ping at depth 2, nothing deeper", root, tree)
	}
	// The deepest ping's call to pong (depth 3) was refused, naming the limit.
	deepest := sessiontest.WaitEnd(t, m.Conn, m.Names, tree[1].SessionID)
	call := sessiontest.Only(t, deepest, protocol.EvToolCall, "")
	if call.Result == nil || call.Result.OK || !strings.Contains(call.Result.Error, "3 deep") || !strings.Contains(call.Result.Error, "allows 2") {
		t.Fatalf("call past the depth limit = %+v, want a refusal naming depth 3 and the limit 2", call.Result)
	}
	if f := sessiontest.Only(t, deepest, protocol.EvIncomplete, ""); f.Text != "stopped below pong" {
		t.Fatalf("deepest ping answered %q, want it to read the refusal", f.Text)
	}
}

// catalogSpec waits until the tools KV offers agent as a tool with want in its description.
func catalogSpec(t *testing.T, m *bustest.Mesh, agent, want string) protocol.ToolSpec {
	t.Helper()
	var spec protocol.ToolSpec
	poll.Eventually(t, 20*time.Second, fmt.Sprintf("the catalog to offer %s with %q", agent, want), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		specs, err := tools.Catalog(ctx, m.Conn.JS, m.Names, []string{agent})
		if err != nil {
			return err
		}
		if len(specs) != 1 || !strings.Contains(specs[0].Description, want) {
			return fmt.Errorf("offered %+v", specs)
		}
		spec = specs[0]
		return nil
	})
	return spec
}

// An agent declares itself once (description, input schema) and a caller sees that declaration
// as the tool's; the arguments are checked against the schema and become the child's task.
func TestAgentDeclarationIsTheToolSpec(t *testing.T) {
	researcher := agentConfig(t, "researcher", `rules:
  - when: {last: "capital of Peru"}
    reply: {text: "Lima"}
`, 2)
	researcher.Agent.Description = "Looks up one fact about a country; give it the question."
	researcher.Agent.InputSchema = map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"question": map[string]any{"type": "string", "minLength": 3}},
		"required":             []any{"question"},
		"additionalProperties": false,
	}
	if errs := researcher.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	boss := agentConfig(t, "boss", `rules:
  - when: {last: "(?s)final_text.*Lima"}
    reply: {text: "Lima, says the researcher."}
  - when: {last: "Peru"}
    reply:
      tool_calls:
        - {name: researcher, args: {question: "What is the capital of Peru?"}}
`, 2, "researcher")
	m := agentMesh(t, boss, researcher)

	spec := catalogSpec(t, m, "researcher", "Looks up one fact")
	if !strings.Contains(string(spec.InputSchema), `"question"`) || spec.Agent != "researcher" {
		t.Fatalf("catalog spec of researcher = %+v, want its declared input schema", spec)
	}
	root := submit(t, m, protocol.SubmitRequest{Agent: "boss", Task: "Ask about Peru."})
	evs := sessiontest.WaitEnd(t, m.Conn, m.Names, root)
	if f := sessiontest.Only(t, evs, protocol.EvFinal, ""); f.Outcome != protocol.OutcomeSuccess || !strings.Contains(f.Text, "Lima") {
		t.Fatalf("boss ended %s with %q", f.Outcome, f.Text)
	}
	kids := sessiontest.Children(t, m.Conn, m.Names, root)
	if len(kids) != 1 {
		t.Fatalf("children = %+v", kids)
	}
	child := sessiontest.WaitEnd(t, m.Conn, m.Names, kids[0].SessionID)
	if st := sessiontest.Only(t, child, protocol.EvSessionStarted, ""); !strings.Contains(st.Task, `"question":"What is the capital of Peru?"`) {
		t.Fatalf("child task %q, want the arguments as JSON", st.Task)
	}

	// Arguments that break the declared schema are refused before any child starts.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range []string{`{"task": "x"}`, `{"question": "ok"}`, `{}`} {
		reply, err := tools.Call(ctx, m.Conn.NC, m.Names, protocol.ToolRequest{SessionID: "s-decl", CallID: "c1", Tool: "researcher",
			Args: json.RawMessage(args)}, time.Minute)
		if err != nil || reply.OK || reply.Kind != protocol.ToolErrBadArgs || !strings.Contains(reply.Error, "at '") {
			t.Errorf("args %s: %+v, %v; want invalid_arguments naming the path", args, reply, err)
		}
	}
	if kids := sessiontest.Children(t, m.Conn, m.Names, "s-decl"); len(kids) != 0 {
		t.Fatalf("bad arguments started %+v", kids)
	}
}
