package toolhost_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/miner"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tools"
)

// withMemory runs memoryd on the mesh (the KV store; a bag-of-words embedder, since these tests
// need vectors that match shared words, not meaning) and returns a client once it serves.
func withMemory(t *testing.T, m *bustest.Mesh) memoryd.Client {
	t.Helper()
	ready := make(chan struct{})
	roles := bustest.RunRoles(t, m)
	roles.GoReady("memoryd", ready, func(ctx context.Context) error {
		return memoryd.Run(ctx, memoryd.Deps{Conn: roles.Connect("memoryd"), Names: m.Names, Config: config.Default(), Embedder: embedtest.Hash{}, Ready: ready, Logger: slog.New(slog.DiscardHandler)})
	})
	return memoryd.Client{NC: m.Conn.NC, Names: m.Names}
}

func memoryOf(t *testing.T, mem memoryd.Client, agent string) []memory.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := mem.ListAll(ctx, protocol.MemoryListRequest{Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

const scoutScript = `rules:
  - when: {last: "(?s)stored"}
    reply: {text: "The vault code for Peru is 4417."}
  - when: {last: "vault code"}
    reply:
      tool_calls:
        - {name: remember, args: {note: "Peru vault codes are kept by the archive desk."}}
`

// The parent asks the scout on its first session; on the next one the finding is in its prompt,
// labelled with where it came from, and it answers without calling the scout.
const bossMemoryScript = `rules:
  - when: {last: "(?s)found by sub-agent scout in session a-[0-9a-f]+\\] The vault code for Peru is 4417"}
    reply: {text: "4417, from what the scout found before."}
  - when: {last: "(?s)final_text.*4417"}
    reply: {text: "4417, says the scout."}
  - when: {last: "vault code"}
    reply:
      tool_calls:
        - {name: scout, args: {task: "Find the vault code for Peru."}}
`

// A child that shares with its parent (memory.share_with_parent) leaves its answer and its
// remember notes in the parent's memory, tagged subagent with the child agent and session; the
// parent's next session has them in its prompt and answers without the child; a repeated finish
// writes nothing twice.
func TestSubagentFindingsReachTheParentsMemory(t *testing.T) {
	scout := agentConfig(t, "scout", scoutScript, 2)
	scout.Memory.Enabled, scout.Memory.SessionTools, scout.Memory.ShareWithParent = true, true, true
	boss := agentConfig(t, "boss", bossMemoryScript, 2, "scout")
	boss.Memory.Enabled = true
	m := agentMesh(t, boss, scout)
	mem := withMemory(t, m)

	first := submit(t, m, protocol.SubmitRequest{Agent: "boss", Task: "What is the vault code for Peru?"})
	evs := sessiontest.WaitEnd(t, m.Conn, m.Names, first)
	if f := sessiontest.Only(t, evs, protocol.EvFinal, ""); f.Text != "4417, says the scout." {
		t.Fatalf("first session answered %q", f.Text)
	}
	kids := sessiontest.Children(t, m.Conn, m.Names, first)
	if len(kids) != 1 {
		t.Fatalf("children = %+v", kids)
	}
	child := kids[0].SessionID
	// The scout's own note went to its own memory through remember, and its call is traced.
	cEvs := sessiontest.WaitEnd(t, m.Conn, m.Names, child)
	if call := sessiontest.Only(t, cEvs, protocol.EvToolCall, ""); call.Tool != protocol.ToolRemember || call.Result == nil || !call.Result.OK {
		t.Fatalf("scout's remember call = %+v", call)
	}
	if own := memoryOf(t, mem, "scout"); len(own) != 1 || own[0].Source != protocol.SourceRemembered || own[0].SourceSession != child {
		t.Fatalf("scout's memory = %+v, want its note, source remembered, from its session", own)
	}

	got := memoryOf(t, mem, "boss")
	texts := map[string]memory.Entry{}
	for _, e := range got {
		texts[e.Text] = e
		if e.Source != protocol.SourceSubagent || e.SourceAgent != "scout" || e.SourceSession != child || e.Tier != protocol.TierTactical {
			t.Errorf("boss entry %+v, want source subagent from scout's session %s", e, child)
		}
	}
	if len(got) != 2 || texts["The vault code for Peru is 4417."].ID == "" || texts["Peru vault codes are kept by the archive desk."].ID == "" {
		t.Fatalf("boss's memory = %+v, want the scout's answer and its note", got)
	}

	// The toolhost runs the call again (its record of the reply is gone, as after a crash
	// before it was kept): the same child is followed, and nothing is written twice.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls, err := m.Conn.JS.KeyValue(ctx, m.Names.Bucket(protocol.BucketToolCalls))
	if err != nil {
		t.Fatal(err)
	}
	call := sessiontest.Only(t, evs, protocol.EvToolCall, "")
	if err := calls.Purge(ctx, call.CallID); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
	reply, err := toolsCall(ctx, m, protocol.ToolRequest{SessionID: first, CallID: call.CallID, Tool: "scout", Args: call.Args, Agent: "boss"})
	if err != nil || !reply.OK || !strings.Contains(string(reply.Result), child) {
		t.Fatalf("repeated call: %+v, %v", reply, err)
	}
	again := memoryOf(t, mem, "boss")
	if len(again) != 2 {
		t.Fatalf("after a repeated finish boss has %d entries, want 2", len(again))
	}
	for _, e := range again {
		if e.Hits != texts[e.Text].Hits || e.DistinctSessions() != 1 {
			t.Errorf("entry %q counted again: hits %d → %d, sessions %d", e.Text, texts[e.Text].Hits, e.Hits, e.DistinctSessions())
		}
	}

	// The next session of the boss finds the finding in its prompt and uses it.
	second := submit(t, m, protocol.SubmitRequest{Agent: "boss", Task: "Tell me the vault code for Peru again."})
	evs2 := sessiontest.WaitEnd(t, m.Conn, m.Names, second)
	if f := sessiontest.Only(t, evs2, protocol.EvFinal, ""); f.Text != "4417, from what the scout found before." {
		t.Fatalf("second session answered %q, want it to use the remembered finding", f.Text)
	}
	for _, ev := range evs2 {
		if ev.Type == protocol.EvToolCall {
			t.Fatalf("second session called %s; the finding was in memory", ev.Tool)
		}
	}
	var sources []string
	for _, g := range sessiontest.Only(t, evs2, protocol.EvRetrieval, "").Guidelines {
		sources = append(sources, g.Source+"/"+g.SourceAgent)
	}
	if !strings.Contains(strings.Join(sources, ","), "subagent/scout") {
		t.Fatalf("retrieved %v, want the scout's findings", sources)
	}
}

// A child that does not share keeps its findings to itself.
func TestSubagentWithoutShareLeavesTheParentsMemoryAlone(t *testing.T) {
	scout := agentConfig(t, "scout", scoutScript, 2)
	scout.Memory.Enabled, scout.Memory.SessionTools = true, true
	boss := agentConfig(t, "boss", bossMemoryScript, 2, "scout")
	boss.Memory.Enabled = true
	m := agentMesh(t, boss, scout)
	mem := withMemory(t, m)
	first := submit(t, m, protocol.SubmitRequest{Agent: "boss", Task: "What is the vault code for Peru?"})
	if f := sessiontest.Only(t, sessiontest.WaitEnd(t, m.Conn, m.Names, first), protocol.EvFinal, ""); f.Text != "4417, says the scout." {
		t.Fatalf("answered %q", f.Text)
	}
	if got := memoryOf(t, mem, "boss"); len(got) != 0 {
		t.Fatalf("boss's memory = %+v, want nothing from a scout that does not share", got)
	}
}

func toolsCall(ctx context.Context, m *bustest.Mesh, req protocol.ToolRequest) (protocol.ToolReply, error) {
	return tools.Call(ctx, m.Conn.NC, m.Names, req, time.Minute)
}

// remember and recall (memory.session_tools): a note stored in one session is found by recall
// in the next, labelled with where it came from; both calls are traced.
func TestRememberThenRecall(t *testing.T) {
	notes := agentConfig(t, "notes", `rules:
  - when: {last: "Tuesdays\\.,noted by this agent in session s-"}
    reply: {text: "Deploys go out on Tuesdays (recalled)."}
  - when: {last: "(?s)\"found\":\\[\\]|found\\[0\\]"}
    reply: {text: "I have nothing on that."}
  - when: {last: "(?s)stored"}
    reply: {text: "Noted."}
  - when: {last: "Note that"}
    reply:
      tool_calls:
        - {name: remember, args: {note: "Deploys of the billing service go out on Tuesdays."}}
  - when: {last: "When do"}
    reply:
      tool_calls:
        - {name: recall, args: {query: "billing service deploys"}}
`, 2)
	notes.Memory.Enabled, notes.Memory.SessionTools = true, true
	m := agentMesh(t, notes)
	withMemory(t, m)

	first := submit(t, m, protocol.SubmitRequest{Agent: "notes", Task: "Note that billing deploys are on Tuesdays."})
	if f := sessiontest.Only(t, sessiontest.WaitEnd(t, m.Conn, m.Names, first), protocol.EvFinal, ""); f.Text != "Noted." {
		t.Fatalf("first session answered %q", f.Text)
	}
	second := submit(t, m, protocol.SubmitRequest{Agent: "notes", Task: "When do billing deploys go out?"})
	evs := sessiontest.WaitEnd(t, m.Conn, m.Names, second)
	call := sessiontest.Only(t, evs, protocol.EvToolCall, "")
	if call.Tool != protocol.ToolRecall || call.Result == nil || !call.Result.OK ||
		!strings.Contains(string(call.Result.Result), `"origin":"noted by this agent in session `+first+`"`) {
		t.Fatalf("recall call = %+v, want the note with its origin", call.Result)
	}
	if f := sessiontest.Only(t, evs, protocol.EvFinal, ""); f.Text != "Deploys go out on Tuesdays (recalled)." {
		t.Fatalf("second session answered %q", f.Text)
	}
}

// Agents that name the same memory.namespace share one memory: what one remembers, the other
// recalls, and nothing is kept under either agent's own name.
func TestMemoryNamespaceIsShared(t *testing.T) {
	writer := agentConfig(t, "writer", `rules:
  - when: {last: "(?s)stored"}
    reply: {text: "Noted."}
  - when: {last: "Note that"}
    reply:
      tool_calls:
        - {name: remember, args: {note: "The staging database is read-only on Fridays."}}
`, 2)
	reader := agentConfig(t, "reader", `rules:
  - when: {last: "Fridays\\.,noted by this agent in session s-"}
    reply: {text: "Read-only on Fridays."}
  - when: {last: "(?s)recall|\"found\""}
    reply: {text: "Nothing."}
  - when: {last: "staging"}
    reply:
      tool_calls:
        - {name: recall, args: {query: "staging database Fridays"}}
`, 2)
	for _, c := range []*config.Config{writer, reader} {
		c.Memory.Enabled, c.Memory.SessionTools, c.Memory.Namespace = true, true, "team"
	}
	m := agentMesh(t, writer, reader)
	mem := withMemory(t, m)
	w := submit(t, m, protocol.SubmitRequest{Agent: "writer", Task: "Note that staging is read-only on Fridays."})
	if f := sessiontest.Only(t, sessiontest.WaitEnd(t, m.Conn, m.Names, w), protocol.EvFinal, ""); f.Text != "Noted." {
		t.Fatalf("writer answered %q", f.Text)
	}
	if team, own := memoryOf(t, mem, "team"), memoryOf(t, mem, "writer"); len(team) != 1 || len(own) != 0 {
		t.Fatalf("team memory %+v, writer's own %+v; want the note in team only", team, own)
	}
	r := submit(t, m, protocol.SubmitRequest{Agent: "reader", Task: "Is staging writable today?"})
	evs := sessiontest.WaitEnd(t, m.Conn, m.Names, r)
	if f := sessiontest.Only(t, evs, protocol.EvFinal, ""); f.Text != "Read-only on Fridays." {
		t.Fatalf("reader answered %q; it should have recalled the writer's note", f.Text)
	}
	if st := sessiontest.Only(t, evs, protocol.EvStepStarted, ""); st.Attrs[protocol.AttrMemory] != "team" {
		t.Fatalf("step_started attrs %v, want memory team for the miner", st.Attrs)
	}
}

// How to use a child is learned for the parent: a child that could not do what it was asked ends
// not_accomplished with its reason, the parent's tool call carries that reason, and the miner
// turns it into a guideline in the parent's memory about calling the child.
func TestParentLearnsHowToUseTheChild(t *testing.T) {
	scout := agentConfig(t, "scout", `rules:
  - when: {last: "vault code"}
    reply:
      tool_calls:
        - {name: finish, args: {accomplished: false, answer: "No code found.", reason: "the task names no country; name the country in the task"}}
`, 2)
	boss := agentConfig(t, "boss", `rules:
  - when: {last: "(?s)not_accomplished"}
    reply:
      tool_calls:
        - {name: finish, args: {accomplished: false, answer: "The scout could not find it.", reason: "the scout found no code"}}
  - when: {last: "vault code"}
    reply:
      tool_calls:
        - {name: scout, args: {task: "Find the vault code."}}
`, 2, "scout")
	boss.Memory.Enabled, boss.Miner.Enabled = true, true
	m := agentMesh(t, boss, scout)
	mem := withMemory(t, m)
	roles := bustest.RunRoles(t, m)
	roles.Go("miner", func(ctx context.Context) error {
		return miner.Run(ctx, miner.Deps{Conn: roles.Connect("miner"), Names: m.Names, Config: boss, Logger: slog.New(slog.DiscardHandler), NoModel: true})
	})

	s := submit(t, m, protocol.SubmitRequest{Agent: "boss", Task: "What is the vault code?"})
	if f := sessiontest.Only(t, sessiontest.WaitEnd(t, m.Conn, m.Names, s), protocol.EvIncomplete, ""); f.Outcome != protocol.OutcomeNotAccomplished || f.Text != "The scout could not find it." {
		t.Fatalf("boss ended %s with %q, want not_accomplished with its answer", f.Outcome, f.Text)
	}
	poll.Eventually(t, 60*time.Second, "a lesson about calling scout in boss's memory", func() error {
		entries := memoryOf(t, mem, "boss")
		for _, e := range entries {
			if e.Polarity == protocol.PolarityAvoid && slices.Contains(e.Tools, "scout") && strings.Contains(e.Text, "names no country") {
				return nil
			}
		}
		return fmt.Errorf("boss's memory holds %+v", entries)
	})
}
