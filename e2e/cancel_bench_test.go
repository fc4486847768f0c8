package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// TestCancelLatencyUnderLoad measures how long a cancel takes, from the request to the session's
// usage event, for sessions running a long tool while other sessions loop (model call, tool
// call, again) on the same executor and toolhost. It is a load measurement, not part of
// `make test`: run it with `make cancel-bench` (SKEIN_CANCEL_BENCH=1).
func TestCancelLatencyUnderLoad(t *testing.T) {
	if os.Getenv("SKEIN_CANCEL_BENCH") == "" {
		t.Skip("set SKEIN_CANCEL_BENCH=1 (make cancel-bench)")
	}
	m := startGovMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const loaders, rounds = 3, 20
	var load []string
	for range loaders {
		load = append(load, m.submit(t, "loop forever", &protocol.Budget{MaxTurns: 100000}))
	}
	defer func() {
		for _, id := range load {
			m.skeinCancel(t, id)
		}
	}()
	// The load is on once every loop has made a model call.
	for _, id := range load {
		poll.True(t, sessiontest.EndTimeout, "load session "+id+" to loop", func() bool {
			return hasEvent(sessiontest.Events(t, m.c, meshNames, id), protocol.EvModelCall) != nil
		})
	}
	var took []time.Duration
	for i := range rounds {
		pidfile := filepath.Join(m.pids, "direct.pid")
		_ = os.Remove(pidfile)
		id := m.submit(t, fmt.Sprintf("hang direct %d", i), nil)
		pids := readPIDs(t, pidfile)
		began := time.Now()
		m.skeinCancelQuiet(t, id)
		evs, err := sessiontest.Follow(ctx, m.c, meshNames, id)
		if err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(began))
		if term, _ := ending(t, id, evs); term.Outcome != protocol.OutcomeCancelled {
			t.Fatalf("outcome %s", term.Outcome)
		}
		waitGone(t, pids, 2*time.Second)
	}
	// The load kept running throughout: its sessions are still looping.
	for _, id := range load {
		evs := sessiontest.Events(t, m.c, meshNames, id)
		if hasEvent(evs, protocol.EvUsage) != nil {
			t.Fatalf("load session %s ended during the measurement", id)
		}
	}
	slices.Sort(took)
	var parts []string
	for _, d := range took {
		parts = append(parts, d.Round(time.Millisecond).String())
	}
	t.Logf("cancel → session end, %d rounds under %d looping sessions: median %s, p90 %s, max %s (all: %s)",
		rounds, loaders, took[len(took)/2].Round(time.Millisecond), took[len(took)*9/10].Round(time.Millisecond),
		took[len(took)-1].Round(time.Millisecond), strings.Join(parts, " "))
}
