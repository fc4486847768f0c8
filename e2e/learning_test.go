package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore/milvustest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/trace"
)

// TestLearningLoopAcrossProcesses is the loop end to end with every role its own process: the
// scaffolded hello tool fails the same way in three sessions; the miner turns the failure into
// one guideline that memoryd promotes to strategic; in the fourth session that guideline is in
// the system prompt, the scripted model (whose rule is conditioned on it) calls the tool right
// first time, and the session ends success.
func TestLearningLoopAcrossProcesses(t *testing.T) {
	learningLoop(t, nil)
}

// TestLearningLoopOnMilvus is the same loop with memory.store: milvus, against the real Milvus
// server the test run shares (milvustest), entry records in the mesh's memory bucket.
func TestLearningLoopOnMilvus(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	srv := milvustest.ServerFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mc, err := client.NewClient(ctx, client.Config{Address: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	// The mesh uses the default namespace, so its collection name is fixed: start from none
	// (the server may have served an earlier test); the records live in this test's NATS.
	coll := milvusstore.PrefixFor(protocol.NewNames("")) + "_entries"
	if ok, err := mc.HasCollection(ctx, coll); err != nil {
		t.Fatal(err)
	} else if ok {
		if err := mc.DropCollection(ctx, coll); err != nil {
			t.Fatal(err)
		}
	}
	learningLoop(t, func(cfg string) string {
		return strings.Replace(cfg, "\nmemory:\n", "\nmemory:\n  store: milvus\n  milvus_addr: "+srv.Addr+"\n", 1)
	})
	// The failure guideline the loop learned is a row of the Milvus collection.
	qctx, qcancel := context.WithTimeout(context.Background(), time.Minute)
	defer qcancel()
	rs, err := mc.Query(qctx, coll, nil, `tier == "strategic" && polarity == "avoid"`, []string{"id"}, client.WithSearchQueryConsistencyLevel(entity.ClStrong))
	if err != nil {
		t.Fatal(err)
	}
	if c := rs.GetColumn("id"); c == nil || c.Len() != 1 {
		t.Fatalf("milvus collection %s does not hold the one strategic failure guideline: %v", coll, c)
	}
}

// learningLoop runs the loop on the scaffolded offline project, its config passed through edit.
func learningLoop(t *testing.T, edit func(string) string) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	needMiniLM(t)
	project := reachableTempDir(t)
	out, err := exec.Command(filepath.Join(binaries(t), "skein"), "init", project).CombinedOutput()
	if err != nil {
		t.Fatalf("skein init: %v\n%s", err, out)
	}
	cfg := filepath.Join(project, "agent.offline.yaml")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// This loop is the guidelines': no worked example. Session 1's case would show session 2 the
	// tool's error and the call that worked, and the scaffold's script answers that error with
	// the right call, so session 2 would not fail first (docs/memory.md#cases-and-skills).
	edited := strings.Replace(string(b), "\nmemory:\n", "\nmemory:\n  cases: {examples: 0}\n", 1)
	if edited == string(b) {
		t.Fatal("the scaffold's config has no memory section")
	}
	if edit != nil {
		before := edited
		if edited = edit(edited); edited == before {
			t.Fatal("config edit changed nothing")
		}
	}
	if err := os.WriteFile(cfg, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	url := natsServer(t)
	c := connect(t, url)
	env := []string{"SKEIN_HOME=" + filepath.Join(project, ".skein")}
	args := []string{"--nats", url, "--config", cfg}
	for _, role := range []string{"toolhost", "executor", "memoryd", "miner", "planner", "gateway"} {
		start(t, env, role, role, args...)
	}
	bustest.WaitAgent(t, c, meshNames, "greeter")
	waitMemoryd(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	for i := 1; i <= 3; i++ {
		evs := runAndWaitMined(ctx, t, c, fmt.Sprintf("learn-%d", i))
		if got := outcomeOf(evs); got != protocol.OutcomeSuccessWithRecovery {
			t.Fatalf("session %d ended %s, want success_with_recovery (the tool fails first)", i, got)
		}
	}

	entries := listMemory(ctx, t, c)
	var avoid []memory.Entry
	for _, e := range entries {
		if e.Polarity == protocol.PolarityAvoid {
			avoid = append(avoid, e)
		}
	}
	if len(avoid) != 1 {
		t.Fatalf("want exactly one failure guideline after three sessions, got %d: %+v", len(avoid), entries)
	}
	g := avoid[0]
	if g.Tier != protocol.TierStrategic || len(g.Sessions) != 3 || !strings.Contains(g.Text, "two-letter language code") {
		t.Fatalf("guideline = tier %s, %d sessions, %q; want strategic, 3, mentioning the two-letter code", g.Tier, len(g.Sessions), g.Text)
	}

	// What a user sees: inspect-memory against the running mesh.
	insp, err := exec.Command(filepath.Join(binaries(t), "skein"), "inspect-memory", "--nats", url, "--config", cfg, "greet Ada").CombinedOutput()
	if err != nil || !strings.Contains(string(insp), "strategic") || !strings.Contains(string(insp), g.ID[:8]) {
		t.Fatalf("skein inspect-memory did not show the strategic guideline %s: %v\n%s", g.ID, err, insp)
	}

	evs := runAndWaitMined(ctx, t, c, "learn-4")
	if got := outcomeOf(evs); got != protocol.OutcomeSuccess {
		t.Fatalf("fourth session ended %s, want success", got)
	}
	used := false
	for _, ev := range evs {
		switch ev.Type {
		case protocol.EvRetrieval:
			for _, r := range ev.Guidelines {
				used = used || (r.ID == g.ID && r.Tier == protocol.TierStrategic)
			}
		case protocol.EvToolCall:
			if ev.Result == nil || !ev.Result.OK {
				t.Fatalf("fourth session still failed a tool call: %+v", ev.Result)
			}
		}
	}
	if !used {
		t.Fatalf("the fourth session's retrieval did not inject strategic guideline %s", g.ID)
	}
}

// runAndWaitMined submits the demo task and follows its trace until the miner's usage event.
func runAndWaitMined(ctx context.Context, t *testing.T, c *bus.Conn, session string) []protocol.Event {
	t.Helper()
	sessiontest.Submit(t, c, meshNames, protocol.SubmitRequest{Task: "Greet Ada", SessionID: session, Caller: "e2e"})
	var evs []protocol.Event
	err := trace.Follow(ctx, c.JS, protocol.NewNames(""), session, func(ev protocol.Event) bool {
		evs = append(evs, ev)
		return !(ev.Type == protocol.EvUsage && ev.Role == protocol.RoleMiner)
	})
	if err != nil {
		t.Fatalf("%s: %v", session, err)
	}
	return evs
}

func outcomeOf(evs []protocol.Event) protocol.Outcome {
	for _, ev := range evs {
		if ev.Type.Terminal() {
			return ev.Outcome
		}
	}
	return ""
}

func listMemory(ctx context.Context, t *testing.T, c *bus.Conn) []memory.Entry {
	t.Helper()
	var rep protocol.MemoryListReply
	if err := bus.Request(ctx, c.NC, protocol.NewNames("").Memory(protocol.MemList), &protocol.MemoryListRequest{Limit: 100}, &rep, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if rep.Error != "" {
		t.Fatal(rep.Error)
	}
	return rep.Entries
}
