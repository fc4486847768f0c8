package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/executor"
	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/planner"
)

// runChat runs `skein chat` in process with stdin and returns what it printed on stdout and stderr.
func runChat(t *testing.T, m *bustest.Mesh, stdin string, args ...string) (string, string, error) {
	t.Helper()
	return runSkein(t, time.Minute, func(c *cobra.Command) { c.SetIn(strings.NewReader(stdin)) },
		append([]string{"--nats", m.URL, "chat"}, args...)...)
}

// /memory in chat shows what the mesh remembers for the agent, ranked for the query.
func TestChatMemoryShowsWhatTheMeshRemembers(t *testing.T) {
	m := memMesh(t)
	in := filepath.Join(t.TempDir(), "in.jsonl")
	body := `{"agent":"demo","text":"Check the csv path exists before csv_read.","polarity":"avoid","tier":"strategic","tools":["csv_read"]}
{"agent":"other","text":"Never read csv files on Sundays.","polarity":"avoid","tier":"strategic"}
`
	if err := os.WriteFile(in, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, m, "memory", "import", in); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := runChat(t, m, "/memory check the csv path\n/quit\n", "--agent", "demo")
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "Check the csv path exists") || strings.Contains(stderr, "Sundays") {
		t.Fatalf("/memory printed, for agent demo:\n%s", stderr)
	}
	_, stderr, err = runChat(t, m, "/memory\n/frobnicate\n/cancel\n")
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, stderr)
	}
	for _, want := range []string{"memory (embedding model", "unknown command", "nothing is running"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("chat stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// chatScript answers from the conversation it is shown: the first "yes" of a conversation, then
// any later one (times: 1 is counted in the transcript); "what have I said" from the turns there.
const chatScript = `rules:
  - when: {last: "^yes$"}
    reply: {text: "First yes."}
    times: 1
  - when: {last: "^yes$"}
    reply: {text: "Second yes."}
  - when: {last: "what have I said", any: "(?s)one.*two.*three"}
    reply: {text: "You said one, two and three."}
  - when: {last: "what have I said", any: "(?s)one.*two"}
    reply: {text: "You said one and two."}
  - reply: {text: "Noted."}
`

// chatMesh runs a gateway, a planner and an executor of the scripted agent "talker" on a test mesh.
func chatMesh(t *testing.T) *bustest.Mesh {
	t.Helper()
	m := bustest.Start(t)
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(chatScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Agent.Name = "talker"
	cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.Script = "scripted", "scripted", script
	cfg.Memory.Enabled, cfg.Miner.Enabled = false, false
	roles := bustest.RunRoles(t, m)
	ready := make(chan struct{})
	ex, err := executor.New(roles.Ctx, executor.Deps{Conn: roles.Connect("executor"), Names: m.Names, Config: cfg, Logger: meshLogger(), ID: "ex-talker", Ready: ready})
	if err != nil {
		t.Fatal(err)
	}
	roles.GoReady("executor", ready, ex.Serve)
	roles.Go("planner", func(ctx context.Context) error {
		return planner.Run(ctx, planner.Deps{Conn: roles.Connect("planner"), Names: m.Names, Config: cfg, Logger: meshLogger(), ID: "planner-talker"})
	})
	gwReady := make(chan struct{})
	roles.GoReady("gateway", gwReady, func(ctx context.Context) error {
		return gateway.Run(ctx, gateway.Deps{Conn: roles.Connect("gateway"), Names: m.Names, Config: cfg, Logger: meshLogger(), Ready: gwReady})
	})
	t.Chdir(t.TempDir()) // no agent.yaml: defaults
	return m
}

var chatTurnRE = regexp.MustCompile(`\(success · turn (\S+) ·`)

// skein chat: the same message twice is two turns, both answered and both counted by /usage;
// --from forks a new conversation from a turn, seeing the transcript up to it, and the
// conversation it came from goes on with all its turns.
func TestChatRepeatsAndForks(t *testing.T) {
	m := chatMesh(t)
	out, stderr, err := runChat(t, m, "yes\nyes\n/usage\n", "--agent", "talker")
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, "talker> First yes.\ntalker> Second yes.") || !strings.Contains(stderr, ": 2 turn(s)") {
		t.Fatalf("two yeses:\n%s\n-- stderr --\n%s", out, stderr)
	}

	_, stderr, err = runChat(t, m, "one\ntwo\nthree\n", "--agent", "talker")
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, stderr)
	}
	turns := chatTurnRE.FindAllStringSubmatch(stderr, -1)
	if len(turns) != 3 {
		t.Fatalf("three turns, stderr:\n%s", stderr)
	}
	out, stderr, err = runChat(t, m, "what have I said?\n", "--from", turns[1][1])
	if err != nil || !strings.Contains(out, "talker> You said one and two.") {
		t.Fatalf("fork from %s: %v\n%s\n-- stderr --\n%s", turns[1][1], err, out, stderr)
	}
	out, stderr, err = runChat(t, m, "what have I said?\n", "--session-id", turns[0][1], "--agent", "talker")
	if err != nil || !strings.Contains(out, "talker> You said one, two and three.") {
		t.Fatalf("the original conversation after the fork: %v\n%s\n-- stderr --\n%s", err, out, stderr)
	}
	if _, stderr, err := runChat(t, m, "hi\n", "--from", turns[1][1], "--session-id", turns[0][1]); err == nil || !strings.Contains(err.Error(), "give one of them") {
		t.Fatalf("--from with --session-id: %v\n%s", err, stderr)
	}
}
