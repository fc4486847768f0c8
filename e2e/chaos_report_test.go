//go:build chaos

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// What the chaos runs (chaos_test.go, chaos_disk_test.go) read back once their sessions are in:
// which ended, how each ended, what the effect tool's log and the dead-letter stream hold.

// waitDone waits until every session's record says done, for at most limit, and returns the
// sessions still not done then (in the order of ids). It watches the sessions bucket rather
// than asking for each record again and again: the mesh under test is not loaded by the wait.
func waitDone(ctx context.Context, t *testing.T, c *bus.Conn, ids []string, limit time.Duration) []string {
	t.Helper()
	left := map[string]bool{}
	for _, id := range ids {
		left[id] = true
	}
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	w, err := bustest.KV(t, c, meshNames, protocol.BucketSessions).WatchAll(wctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for len(left) > 0 {
		var e jetstream.KeyValueEntry
		select {
		case u, ok := <-w.Updates():
			if !ok {
				return notDone(ids, left)
			}
			if u == nil {
				continue // every record there was at the start has been read
			}
			e = u
		case <-wctx.Done():
			return notDone(ids, left)
		}
		var s protocol.Session
		if left[e.Key()] && protocol.Unmarshal(e.Value(), &s) == nil && s.Status == protocol.StatusDone {
			delete(left, e.Key())
		}
	}
	return nil
}

func notDone(ids []string, left map[string]bool) []string {
	var out []string
	for _, id := range ids {
		if left[id] {
			out = append(out, id)
		}
	}
	return out
}

// finished follows a session its record says is done to its usage event (the record says done
// before the planner's last events are stored) and returns its events and its terminal event,
// nil when the trace has none.
func finished(ctx context.Context, t *testing.T, c *bus.Conn, id string) ([]protocol.Event, *protocol.Event) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	evs, err := sessiontest.Follow(wctx, c, meshNames, id)
	if err != nil {
		t.Errorf("session %s: %v", id, err)
	}
	var end *protocol.Event
	for i := range evs {
		if evs[i].Type.Terminal() {
			end = &evs[i]
		}
	}
	return evs, end
}

// effects reads the effect tool's log. The tool appends an attempt line per run and the effect
// only once per call id (it is idempotent by its id, as a tool with real effects should be):
// runs are counted apart from effects, so a call the mesh ran twice shows as a re-run even when
// its effect did not repeat. dups is the effects that happened more than once.
func effects(t *testing.T, path string) (dups, reruns int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	attempts, effected := map[string]int{}, map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct{ Env, Kind string }
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		switch l.Kind {
		case "attempt":
			attempts[l.Env]++
		case "effect":
			effected[l.Env]++
		}
	}
	for _, n := range effected {
		dups += n - 1
	}
	for _, n := range attempts {
		reruns += n - 1
	}
	return dups, reruns
}

// deadLetters is how many messages the mesh dead-lettered.
func deadLetters(ctx context.Context, c *bus.Conn) uint64 {
	if st, err := c.JS.Stream(ctx, meshNames.Stream(protocol.StreamDLQ)); err == nil {
		if info, err := st.Info(ctx); err == nil {
			return info.State.Msgs
		}
	}
	return 0
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)].Round(10 * time.Millisecond)
}
