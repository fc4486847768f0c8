package govern_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func TestTighterWins(t *testing.T) {
	a := protocol.Budget{MaxUSD: 1, MaxTurns: 10, MaxInputTokens: 500}
	b := protocol.Budget{MaxUSD: 0.5, MaxTurns: 0, MaxToolCalls: 3, MaxInputTokens: 900}
	got := a.Tighter(b)
	want := protocol.Budget{MaxUSD: 0.5, MaxTurns: 10, MaxToolCalls: 3, MaxInputTokens: 500}
	if got != want {
		t.Fatalf("Tighter = %+v, want %+v", got, want)
	}
	if b.Tighter(a) != want {
		t.Fatal("Tighter is not symmetric")
	}
}

func TestParseBudget(t *testing.T) {
	b, err := govern.ParseBudget([]string{"max_usd=0.25", "max_turns=4", "deadline_s=1.5", "max_input_tokens=1000"})
	if err != nil {
		t.Fatal(err)
	}
	if b.MaxUSD != 0.25 || b.MaxTurns != 4 || b.DeadlineS != 1.5 || b.MaxInputTokens != 1000 {
		t.Fatalf("parsed %+v", b)
	}
	for _, bad := range []string{"max_usd", "max_turns=-1", "max_turns=1.5", "colour=red", "max_usd=abc"} {
		if _, err := govern.ParseBudget([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestCheckNamesTheLimit(t *testing.T) {
	now := time.Now()
	b := protocol.Budget{MaxInputTokens: 100, MaxTurns: 3, MaxToolCalls: 2, MaxDepth: 1, MaxFanout: 1}
	cases := []struct {
		name  string
		ex    *govern.Exceeded
		limit string
	}{
		{"input", govern.CheckTurn("s", b, protocol.LedgerEntry{InputTokens: 100}, time.Time{}, now), protocol.LimitInputTokens},
		{"turns", govern.CheckTurn("s", b, protocol.LedgerEntry{Turns: 3}, time.Time{}, now), protocol.LimitTurns},
		{"deadline", govern.CheckTurn("s", b, protocol.LedgerEntry{}, now.Add(-time.Second), now), protocol.LimitDeadline},
		{"tools", govern.CheckTool("s", b, protocol.LedgerEntry{ToolCalls: 2}, time.Time{}, now, false, 0), protocol.LimitToolCalls},
		{"depth", govern.CheckTool("s", b, protocol.LedgerEntry{}, time.Time{}, now, true, 2), protocol.LimitDepth},
		{"fanout", govern.CheckTool("s", b, protocol.LedgerEntry{Children: 1}, time.Time{}, now, true, 1), protocol.LimitFanout},
	}
	for _, c := range cases {
		if c.ex == nil || c.ex.Limit != c.limit {
			t.Errorf("%s: got %+v, want limit %s", c.name, c.ex, c.limit)
		}
	}
	if ex := govern.CheckTurn("s", b, protocol.LedgerEntry{InputTokens: 99, Turns: 2}, now.Add(time.Hour), now); ex != nil {
		t.Errorf("under every limit: %v", ex)
	}
	if ex := govern.CheckTool("s", b, protocol.LedgerEntry{Children: 5}, time.Time{}, now, false, 9); ex != nil {
		t.Errorf("depth and fan-out apply to agent tools only: %v", ex)
	}
}

// Concurrent charges from many writers (executors anywhere in the mesh) add up exactly.
func TestLedgerConcurrentCharges(t *testing.T) {
	m := bustest.Start(t)
	ctx := context.Background()
	l, err := govern.OpenLedger(ctx, m.Conn.JS, m.Names)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Charge(ctx, protocol.LedgerEntry{InputTokens: 10, Turns: 1, CostUSD: 0.5}, "child", "root"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, key := range []string{"child", "root"} {
		e, err := l.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if e.InputTokens != 200 || e.Turns != 20 || e.CostUSD != 10 {
			t.Fatalf("%s: %+v, want 200 tokens, 20 turns, $10", key, e)
		}
	}
	if e, _ := l.Get(ctx, "nobody"); e.Turns != 0 {
		t.Fatalf("unknown key spent %+v", e)
	}
}

// A limit reached anywhere in a tree is kept in its budget's ledger entry (the first one wins),
// and every later check of that entry stops on it, even with figures under every limit, and
// before a planning or model call (CheckTurn) as before a tool call.
func TestLimitReachedStopsEveryCheckOfItsEntry(t *testing.T) {
	m := bustest.Start(t)
	ctx := context.Background()
	l, err := govern.OpenLedger(ctx, m.Conn.JS, m.Names)
	if err != nil {
		t.Fatal(err)
	}
	depth := &govern.Exceeded{Limit: protocol.LimitDepth, Reached: "2", Max: "1", Scope: "root"}
	later := &govern.Exceeded{Limit: protocol.LimitFanout, Reached: "3", Max: "3", Scope: "root"}
	for _, ex := range []*govern.Exceeded{depth, later} {
		if err := l.Charge(ctx, protocol.LedgerEntry{Exceeded: ex.Stop()}, "root"); err != nil {
			t.Fatal(err)
		}
	}
	spent, err := l.Get(ctx, "root")
	if err != nil {
		t.Fatal(err)
	}
	b := protocol.Budget{MaxDepth: 1, MaxTurns: 100}
	now := time.Now()
	for name, got := range map[string]*govern.Exceeded{
		"turn": govern.CheckTurn("root", b, spent, time.Time{}, now),
		"tool": govern.CheckTool("root", b, spent, time.Time{}, now, false, 0),
	} {
		if got == nil || *got != *depth {
			t.Errorf("%s check: %+v; want the depth limit the tree reached first", name, got)
		}
	}
}

func TestWatcherCancelsTrackedWork(t *testing.T) {
	m := bustest.Start(t)
	w, err := govern.Watch(m.Conn.NC, m.Names)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	other, releaseOther := w.Track(context.Background(), "s2")
	defer releaseOther()
	ctx, release := w.Track(context.Background(), "s1")
	defer release()
	if err := m.Conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	data, _ := protocol.Marshal(&protocol.CancelNotice{SessionID: "s1", By: "ada", Reason: "enough"})
	if err := m.Conn.NC.Publish(m.Names.CancelNotice("s1"), data); err != nil {
		t.Fatal(err)
	}
	poll.Receive(t, 5*time.Second, "the tracked work to be cancelled", ctx.Done())
	ce, ok := govern.AsCancelled(ctx)
	if !ok || ce.By != "ada" || ce.Reason != "enough" {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
	if other.Err() != nil {
		t.Fatal("another session's work was cancelled")
	}
	// Work that starts after the notice is refused at once.
	late, lateRelease := w.Track(context.Background(), "s1")
	defer lateRelease()
	if !errors.Is(late.Err(), context.Canceled) {
		t.Fatal("late work for a cancelled session was not cancelled")
	}
	if _, ok := w.Cancelled("s1"); !ok {
		t.Fatal("watcher forgot the cancelled session")
	}
}
