//go:build chaos

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// What the chaos runs (chaos_test.go, chaos_disk_test.go) share: their settings, the steady
// arrival of sessions, and what they read back once their sessions are in: which ended, how
// each ended, what the effect tool's log and the dead-letter stream hold.

// chaosSetting reads a duration or rate knob from the environment (make chaos passes them on).
func chaosSetting(t *testing.T, name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var f float64
	if _, err := fmt.Sscan(v, &f); err != nil || f <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return f
}

// chaosSeconds is chaosSetting for a knob in seconds.
func chaosSeconds(t *testing.T, name string, def float64) time.Duration {
	return time.Duration(chaosSetting(t, name, def) * float64(time.Second))
}

// chaosKnobs are the settings both runs have: sessions per second (keep it below what the mesh
// drains, or the figures measure a queue), the effect tool's wait, the calm before the fault,
// and how long the sessions may take to drain after the last arrival (a session still running
// then is counted lost and the report is still printed).
type chaosKnobs struct {
	rate, toolWait float64
	calmFor, drain time.Duration
}

// chaosStart skips a run that lacks what it needs (python3 for the effect tool, MiniLM for
// memory) and reads the shared knobs.
func chaosStart(t *testing.T) chaosKnobs {
	t.Helper()
	devtest.NeedProgram(t, "python3")
	needMiniLM(t)
	return chaosKnobs{
		rate:     chaosSetting(t, "SKEIN_CHAOS_RATE", 1.5),
		toolWait: chaosSetting(t, "SKEIN_CHAOS_TOOL_S", 3),
		calmFor:  chaosSeconds(t, "SKEIN_CHAOS_CALM_S", 40),
		drain:    chaosSeconds(t, "SKEIN_CHAOS_DRAIN_S", 180),
	}
}

// script is chaosScript with the effect tool's wait.
func (k chaosKnobs) script() string {
	return strings.ReplaceAll(chaosScript, "$TOOL_S", fmt.Sprint(k.toolWait))
}

// arrive calls submit(i) for i = from, from+1, ... at the steady rate until stop is closed, and
// returns the next i.
func (k chaosKnobs) arrive(from int, stop <-chan struct{}, submit func(i int)) int {
	// pacing: the arrival schedule, one session every 1/rate seconds.
	tick := time.NewTicker(time.Duration(float64(time.Second) / k.rate))
	defer tick.Stop()
	for i := from; ; i++ {
		submit(i)
		select {
		case <-stop:
			return i + 1
		case <-tick.C:
		}
	}
}

// closeAfter returns a channel closed once d has passed: the end of a phase of a run, which
// more than one goroutine may wait for.
func closeAfter(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

// tally counts how the accepted sessions of a run ended.
type tally struct {
	drain                   time.Duration               // how long they had after the last arrival
	ok                      func(protocol.Outcome) bool // what counts as success
	succeeded, failed, lost int
	reasons                 map[string]int // "outcome: reason" of the failed ones
}

func newTally(drain time.Duration, ok func(protocol.Outcome) bool) *tally {
	return &tally{drain: drain, ok: ok, reasons: map[string]int{}}
}

// count reads how session id ended and counts it: lost when it is still running (running) or
// its trace has no terminal event, failed when its outcome is no success; each is an error of
// the test. It returns the session's events, and its terminal event when it succeeded.
func (tl *tally) count(ctx context.Context, t *testing.T, c *bus.Conn, id string, running bool) ([]protocol.Event, *protocol.Event) {
	t.Helper()
	if running {
		tl.lost++
		t.Errorf("session %s still running %s after the last arrival", id, tl.drain)
		return nil, nil
	}
	evs, end := finished(ctx, t, c, id)
	switch {
	case end == nil:
		tl.lost++
		t.Errorf("session %s is done but its trace has no terminal event", id)
		return evs, nil
	case !tl.ok(end.Outcome):
		tl.failed++
		tl.reasons[string(end.Outcome)+": "+end.Reason]++
		t.Errorf("session %s ended %s: %s", id, end.Outcome, end.Reason)
		return evs, nil
	}
	tl.succeeded++
	return evs, end
}

// write puts the counts in the report, beside what the effect tool's log says.
func (tl *tally) write(report *strings.Builder, accepted, dups, reruns int) {
	fmt.Fprintf(report, "accepted %d, finished %d (succeeded %d, failed %d), lost %d, duplicated side effects %d (tool runs repeated by the mesh: %d)\n",
		accepted, tl.succeeded+tl.failed, tl.succeeded, tl.failed, tl.lost, dups, reruns)
	for r, n := range tl.reasons {
		fmt.Fprintf(report, "  failed %d× %s\n", n, r)
	}
}

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
