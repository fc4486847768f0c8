package toolhost_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tools"
)

type effectLine struct {
	Env  string `json:"env"`
	Arg  string `json:"arg"`
	Note string `json:"note"`
	Kind string `json:"kind"`
}

// effectHost serves the side-effecting fixture tool, which appends an attempt line to a log per
// run (and an effect line once per call id, which these tests do not count: they count runs).
func effectHost(t *testing.T, m *bustest.Mesh, ids ...string) string {
	t.Helper()
	devtest.NeedProgram(t, "python3")
	// Each call runs as a uid of its own when the tests run as root: the log is everyone's.
	log := filepath.Join(devtest.SharedDir(t), "effects.jsonl")
	if err := os.WriteFile(log, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(log, 0o666); err != nil { // whatever the umask
		t.Fatal(err)
	}
	t.Setenv("EFFECT_LOG", log)
	cfg := config.Default()
	cfg.Tools.ManifestDirs = []string{filepath.Join(devtest.RepoRoot(t), "e2e", "testdata", "tools")}
	cfg.Tools.Enabled = []string{"effect"}
	for _, id := range ids {
		startHost(t, m, cfg, id)
	}
	return log
}

func readEffects(t *testing.T, path string) []effectLine {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []effectLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l effectLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("effect log line %q: %v", sc.Text(), err)
		}
		if l.Kind == "attempt" {
			out = append(out, l)
		}
	}
	return out
}

func effectCall(t *testing.T, m *bustest.Mesh, id, note string, seconds float64) protocol.ToolReply {
	t.Helper()
	args, _ := json.Marshal(map[string]any{"note": note, "seconds": seconds})
	req := protocol.ToolRequest{SessionID: "s-once", StepID: "s1", CallID: id, Tool: "effect", Args: args,
		DeadlineMS: time.Now().Add(time.Minute).UnixMilli()}
	rep, err := tools.Call(context.Background(), m.Conn.NC, m.Names, req, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestRepeatedCallIsAnsweredFromTheRecord(t *testing.T) {
	m := bustest.Start(t)
	log := effectHost(t, m, "host-a")
	id := protocol.ToolCallID("s-once", "s1", 1, 0)

	first := effectCall(t, m, id, "hello", 0)
	if !first.OK || first.Replayed {
		t.Fatalf("first call: %+v", first)
	}
	second := effectCall(t, m, id, "hello", 0)
	if !second.OK || !second.Replayed || string(second.Result) != string(first.Result) {
		t.Fatalf("repeat: %+v, want the first reply replayed (%s)", second, first.Result)
	}
	lines := readEffects(t, log)
	if len(lines) != 1 {
		t.Fatalf("the tool ran %d times for one call id, want 1: %+v", len(lines), lines)
	}
	if lines[0].Env != id || lines[0].Arg != id {
		t.Errorf("tool saw call id env=%q arg=%q, want %q in both", lines[0].Env, lines[0].Arg, id)
	}
	// A new id is a new call.
	if rep := effectCall(t, m, protocol.ToolCallID("s-once", "s1", 1, 1), "hello", 0); !rep.OK || rep.Replayed {
		t.Fatalf("new call id: %+v", rep)
	}
	if n := len(readEffects(t, log)); n != 2 {
		t.Fatalf("%d runs after a second call id, want 2", n)
	}
	// The trace shows both attempts of the first id: one run, one replay.
	var kinds []string
	_ = poll.Wait(10*time.Second, func() error {
		kinds = kinds[:0]
		for _, ev := range sessiontest.Of(sessiontest.Events(t, m.Conn, m.Names, "s-once"), protocol.EvToolAttempt, "") {
			kinds = append(kinds, ev.CallID+":"+ev.Attrs["attempt"])
		}
		if len(kinds) < 3 {
			return fmt.Errorf("%d attempts", len(kinds))
		}
		return nil
	})
	want := []string{id + ":run", id + ":replay", protocol.ToolCallID("s-once", "s1", 1, 1) + ":run"}
	if len(kinds) != 3 || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
		t.Fatalf("tool_attempt events %v, want %v", kinds, want)
	}
}

func TestRepeatWhileRunningWaitsForTheFirstRun(t *testing.T) {
	m := bustest.Start(t)
	log := effectHost(t, m, "host-a", "host-b")
	id := protocol.ToolCallID("s-once", "s1", 2, 0)
	var wg sync.WaitGroup
	replies := make([]protocol.ToolReply, 4)
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = effectCall(t, m, id, "slow", 1.5)
		}()
	}
	wg.Wait()
	replayed := 0
	for i, r := range replies {
		if !r.OK {
			t.Fatalf("reply %d: %+v", i, r)
		}
		if r.Replayed {
			replayed++
		}
	}
	if n := len(readEffects(t, log)); n != 1 {
		t.Fatalf("4 concurrent requests of one call id ran the tool %d times, want 1", n)
	}
	if replayed != 3 {
		t.Errorf("%d replies marked replayed, want 3", replayed)
	}
}

func TestCallPastItsCallersDeadlineIsNotStarted(t *testing.T) {
	m := bustest.Start(t)
	log := effectHost(t, m, "host-a")
	req := protocol.ToolRequest{SessionID: "s-late", StepID: "s1", CallID: protocol.ToolCallID("s-late", "s1", 1, 0), Tool: "effect",
		Args: json.RawMessage(`{"note": "late"}`), DeadlineMS: time.Now().Add(-time.Second).UnixMilli()}
	rep, err := tools.Call(context.Background(), m.Conn.NC, m.Names, req, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Kind != protocol.ToolErrTimeout {
		t.Fatalf("late call: %+v, want a timeout without running", rep)
	}
	if n := len(readEffects(t, log)); n != 0 {
		t.Fatalf("a call past its deadline ran %d times", n)
	}
}

// A call whose host died mid-run (its running record's lease ran out) is taken over by the next
// request of the same id, and runs.
func TestRepeatOfACallWhoseHostDiedRunsIt(t *testing.T) {
	m := bustest.Start(t)
	log := effectHost(t, m, "host-a")
	id := protocol.ToolCallID("s-once", "s1", 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := m.Conn.JS.KeyValue(ctx, m.Names.Bucket(protocol.BucketToolCalls))
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]any{"note": "orphan", "seconds": 0})
	dead := protocol.ToolCallRecord{CallID: id, Tool: "effect", ArgsHash: protocol.ArgsHash("effect", args), State: protocol.CallRunning,
		Host: "host-dead", Started: time.Now().Add(-time.Minute), LeaseUntil: time.Now().Add(-time.Second)}
	data, err := protocol.Marshal(&dead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, id, data); err != nil {
		t.Fatal(err)
	}
	rep := effectCall(t, m, id, "orphan", 0)
	if !rep.OK || rep.Replayed || rep.Host != "host-a" {
		t.Fatalf("reply %+v, want a fresh run by host-a", rep)
	}
	if n := len(readEffects(t, log)); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}

// A request that asks for progress hears from the toolhost holding it every
// protocol.CallProgressEvery until its reply, and nothing after; one that does not ask gets only
// the reply.
func TestAToolhostSaysItHoldsACallUntilItAnswers(t *testing.T) {
	m := bustest.Start(t)
	effectHost(t, m, "host-a")
	bustest.WaitTools(t, m.Conn, m.Names, "effect")
	args, _ := json.Marshal(map[string]any{"note": "slow", "seconds": 1.5})
	for _, asks := range []bool{true, false} {
		data, err := protocol.Marshal(&protocol.ToolRequest{SessionID: "s-progress", StepID: "s1", Tool: "effect", Args: args,
			CallID: protocol.ToolCallID("s-progress", "s1", 1, map[bool]int{true: 0, false: 1}[asks])})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := m.Conn.NC.SubscribeSync(m.Conn.NC.NewInbox())
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: m.Names.Tool("effect"), Reply: sub.Subject, Data: data, Header: nats.Header{}}
		if asks {
			msg.Header.Set(protocol.HeaderCallProgress, "1")
		}
		if err := m.Conn.NC.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		beats := 0
		for {
			got, err := sub.NextMsg(30 * time.Second)
			if err != nil {
				t.Fatalf("waiting for the reply: %v", err)
			}
			if len(got.Data) == 0 && got.Header.Get(protocol.HeaderCallProgress) == "running" {
				beats++
				continue
			}
			var rep protocol.ToolReply
			if err := protocol.Unmarshal(got.Data, &rep); err != nil || !rep.OK {
				t.Fatalf("reply %+v (%v)", rep, err)
			}
			break
		}
		switch {
		case asks && beats == 0:
			t.Fatal("no progress from the toolhost during a 1.5 s call that asked for it")
		case !asks && beats > 0:
			t.Fatalf("%d progress messages to a request that did not ask for them", beats)
		}
		poll.Quiet(t, 3*protocol.CallProgressEvery, "no progress after the reply", func() error {
			if n, _, _ := sub.Pending(); n > 0 {
				return fmt.Errorf("%d messages after the reply", n)
			}
			return nil
		})
		_ = sub.Unsubscribe()
	}
}
