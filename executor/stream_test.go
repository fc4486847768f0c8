package executor

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/delta"
	"github.com/skein-mesh/skein/pkg/llm/llmtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// deltaLog collects a session's deltas.
type deltaLog struct {
	mu    sync.Mutex
	shown delta.Shown
	turns map[int]delta.TurnText
	all   []protocol.Delta
}

func (l *deltaLog) add(d protocol.Delta) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.turns == nil {
		l.turns = map[int]delta.TurnText{}
	}
	l.turns[d.Turn] = l.shown.Add(d)
	l.all = append(l.all, d)
}

func (l *deltaLog) turn(n int) delta.TurnText {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.turns[n]
}

func followDeltas(t *testing.T, m *mesh, session string) *deltaLog {
	t.Helper()
	var l deltaLog
	sub, err := delta.Follow(m.Conn.NC, m.Names, session, l.add)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := m.Conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return &l
}

// A step whose model streams: every turn's text (the thoughts before tool calls and the answer)
// reaches a subscriber of the delta subject whole and in order, the tool calls streamed as
// input_json_delta run as before, and what the trace and the usage account is what the provider
// billed.
func TestStreamedTurns(t *testing.T) {
	sc := loadScenario(t)
	m := startMesh(t, sc.dir, sc.cfg.Tools.Enabled...)
	turns := append([]llmtest.Reply(nil), sc.turns...)
	for i := range turns {
		turns[i].ChunkDelay = time.Millisecond
	}
	fake := llmtest.NewAnthropic(t, llmtest.Script{Replies: turns})
	cfg := sc.anthropic(t, fake)
	if !cfg.Executor.Stream.Enabled {
		t.Fatal("executor.stream is off by default")
	}
	x := m.executor(t, cfg, nil)
	st := step(t, cfg, sc.task)
	deltas := followDeltas(t, m, st.SessionID)
	res, evs := m.runStep(t, x, st)
	if res.Outcome != protocol.OutcomeSuccess || res.Turns != len(turns) {
		t.Fatalf("outcome %s after %d turns (%s)", res.Outcome, res.Turns, res.Reason)
	}
	for i, want := range turns {
		poll.True(t, 10*time.Second, "the done delta of every turn", func() bool { return deltas.turn(i + 1).Done })
		if got := deltas.turn(i + 1); got.Text != want.Text || got.Gap {
			t.Fatalf("turn %d streamed %+v, want %q", i+1, got, want.Text)
		}
	}
	if got := res.FinalText; got != strings.TrimSpace(turns[len(turns)-1].Text) {
		t.Fatalf("final text %q", got)
	}
	calls, want := sessiontest.Of(evs, protocol.EvToolCall, ""), 0
	for _, turn := range turns {
		want += len(turn.ToolCalls)
	}
	if len(calls) != want {
		t.Fatalf("%d tool calls, want the scenario's %d", len(calls), want)
	}
	for _, c := range calls {
		if c.Result == nil || !c.Result.OK {
			t.Fatalf("tool call %s failed: %+v", c.Tool, c.Result)
		}
	}
	var traced protocol.Usage
	for _, ev := range sessiontest.Of(evs, protocol.EvModelCall, "") {
		traced = traced.Add(*ev.Usage)
	}
	if traced != fake.Totals() || res.Usage != traced {
		t.Fatalf("traced %+v, step %+v, provider billed %+v", traced, res.Usage, fake.Totals())
	}
	for _, rec := range fake.Requests() {
		if !rec.Streamed {
			t.Fatal("a model call did not stream")
		}
	}
}

// A stream cut after part of the answer was shown ends the step failed with an honest reason,
// and the model is not asked again (readers would see the answer twice).
func TestCutStreamFailsTheStep(t *testing.T) {
	sc := loadScenario(t)
	m := startMesh(t, sc.dir, sc.cfg.Tools.Enabled...)
	final := sc.turns[len(sc.turns)-1]
	final.CutAfter = 5
	fake := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{final, sc.turns[len(sc.turns)-1]}})
	cfg := sc.anthropic(t, fake)
	x := m.executor(t, cfg, nil)
	st := step(t, cfg, sc.task)
	deltas := followDeltas(t, m, st.SessionID)
	res, evs := m.runStep(t, x, st)
	if res.Outcome != protocol.OutcomeFailed || !strings.Contains(res.Reason, "stream broke after") ||
		!strings.Contains(res.Reason, "not retried") || res.FinalText != "" || fake.Calls() != 1 {
		t.Fatalf("outcome %s (%s) text %q after %d calls", res.Outcome, res.Reason, res.FinalText, fake.Calls())
	}
	poll.True(t, 10*time.Second, "the turn's deltas end", func() bool { return deltas.turn(1).Done })
	if got := deltas.turn(1); got.Text == "" || !strings.HasPrefix(final.Text, got.Text) || got.Text == final.Text {
		t.Fatalf("streamed %+v: want a part of the answer", got)
	}
	if mc := sessiontest.Of(evs, protocol.EvModelCall, ""); len(mc) != 1 || !strings.Contains(mc[0].Reason, "stream broke") {
		t.Fatalf("model_call events %+v", mc)
	}
}
