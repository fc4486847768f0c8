package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

var soakDuration = flag.Duration("soak.duration", 0, "run TestSoak for this long (default $SKEIN_SOAK_DURATION, else skipped)")

// The soak's agent: a short session, one call of the compiled sum tool, memory and miner on.
const soakAgent = `
agent:
  name: assistant
  max_steps: 4
llm:
  provider: scripted
  model: scripted
  script: script.yaml
tools:
  manifest_dirs: [$TOOLS]
  enabled: [sum]
`

const soakScript = `
rules:
  - when: {last: "^add"}
    reply:
      tool_calls:
        - {name: sum, args: {numbers: [2, 3, 5]}}
  - reply: {text: "The total is 10."}
`

// TestSoak runs continuous short sessions against one `skein up` for a while (make soak; 10
// minutes by default there) and reports, per minute, sessions/s and latency percentiles, and at
// start and end consumers per stream, goroutines and RSS. It fails when a session fails, when
// consumers or goroutines grow, or when the last minute's p50 is far above the first's.
func TestSoak(t *testing.T) {
	d := *soakDuration
	if d == 0 {
		if v := os.Getenv("SKEIN_SOAK_DURATION"); v != "" {
			var err error
			if d, err = time.ParseDuration(v); err != nil {
				t.Fatalf("SKEIN_SOAK_DURATION=%q: %v", v, err)
			}
		}
	}
	if d == 0 {
		t.Skip("soak run: set -soak.duration or SKEIN_SOAK_DURATION (make soak)")
	}
	workers := 4
	if v := os.Getenv("SKEIN_SOAK_WORKERS"); v != "" {
		fmt.Sscan(v, &workers)
	}
	// SKEIN_SOAK_RETENTION=D keeps every per-session record for D instead of days: each
	// stream's max_age, the session, tool call and step TTLs and the dedup window, so that a run
	// longer than D shows where memory levels off once retention removes as much as arrives.
	agent := soakAgent
	if v := os.Getenv("SKEIN_SOAK_RETENTION"); v != "" {
		if _, err := time.ParseDuration(v); err != nil {
			t.Fatalf("SKEIN_SOAK_RETENTION=%q: %v", v, err)
		}
		agent += fmt.Sprintf(`mesh:
  limits:
    tasks: {max_age: %[1]s}
    work: {max_age: %[1]s}
    results: {max_age: %[1]s}
    trace: {max_age: %[1]s}
    usage: {max_age: %[1]s}
    dlq: {max_age: %[1]s}
    session_ttl: %[1]s
    tool_call_ttl: %[1]s
    step_ttl: %[1]s
    dedup_window: %[1]s
`, v)
	}
	m := startUp(t, writeProject(t, agent, soakScript))
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	task := func(i int) string { return fmt.Sprintf("add the numbers (soak %d)", i) }

	// Warm up (first model load, first tool start), then take the baseline.
	if rs := generate(ctx, m.c, 2, 4, time.Time{}, task); len(rs) != 4 {
		t.Fatalf("warm-up: %d sessions", len(rs))
	} else if n, first := failures(rs); n > 0 {
		t.Fatalf("warm-up: %d sessions failed, first: %s", n, first)
	}
	time.Sleep(2 * time.Second) // let the miner catch up with the warm-up
	before := m.stats(ctx, t)
	t.Logf("start: %s", before)
	if path := os.Getenv("SKEIN_SOAK_HEAP_PROFILE"); path != "" {
		saveHeapProfile(t, m.pprof, path+".start") // diff with: go tool pprof -base PATH.start PATH
	}

	begin := time.Now()
	var cpu map[string]time.Duration
	var cpuOver time.Duration
	cpuDone := make(chan struct{})
	go func() {
		defer close(cpuDone)
		// Profile a stretch in the middle of the run.
		cpuOver = min(30*time.Second, d/3)
		time.Sleep(d / 3)
		cpu = roleCPU(t, m.pprof, cpuOver)
	}()
	// The live heap once a minute (a forced GC in the mesh each time).
	var heap []float64
	heapDone := make(chan struct{})
	go func() {
		defer close(heapDone)
		for i := 1; time.Duration(i)*time.Minute <= d; i++ {
			time.Sleep(time.Until(begin.Add(time.Duration(i) * time.Minute)))
			heap = append(heap, liveHeapMB(t, m.pprof))
		}
	}()
	rs := generate(ctx, m.c, workers, 0, begin.Add(d), task)
	elapsed := time.Since(begin)
	<-cpuDone
	<-heapDone
	// Sessions are done; the miner may still be behind (it learns from each session after it
	// ends), and followers' consumers are deleted after them: "end" is once the mesh is idle,
	// as "start" was, or after a minute.
	var after meshStats
	for deadline := time.Now().Add(time.Minute); ; {
		after = m.stats(ctx, t)
		if (after.backlog == 0 && fmt.Sprint(after.consumers) == fmt.Sprint(before.consumers)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	idle := time.Since(begin.Add(elapsed))

	if path := os.Getenv("SKEIN_SOAK_HEAP_PROFILE"); path != "" {
		saveHeapProfile(t, m.pprof, path) // for `go tool pprof` when the live heap grew
	}
	var report strings.Builder
	fmt.Fprintf(&report, "soak: %d workers, %s, %d sessions, %.1f sessions/s\n", workers, elapsed.Round(time.Second), len(rs), float64(len(rs))/elapsed.Seconds())
	fmt.Fprintf(&report, "minute  sessions  sessions/s  p50      p99      live heap at its end\n")
	var firstP50, lastP50 time.Duration
	minutes := int(elapsed/time.Minute) + 1
	for i := 0; i < minutes; i++ {
		var bucket []sessionResult
		for _, r := range rs {
			if int(r.end.Sub(begin)/time.Minute) == i {
				bucket = append(bucket, r)
			}
		}
		if len(bucket) == 0 {
			continue
		}
		span := min(time.Minute, elapsed-time.Duration(i)*time.Minute)
		ls := latencies(bucket)
		p50, p99 := percentile(ls, 0.5), percentile(ls, 0.99)
		if i == 0 {
			firstP50 = p50
		}
		if span >= 30*time.Second {
			lastP50 = p50
		}
		h := ""
		if i < len(heap) {
			h = fmt.Sprintf("%.0f MB", heap[i])
		}
		fmt.Fprintf(&report, "%6d  %8d  %10.1f  %-7s  %-7s  %s\n", i+1, len(bucket), float64(len(bucket))/span.Seconds(),
			p50.Round(time.Millisecond), p99.Round(time.Millisecond), h)
	}
	ls := latencies(rs)
	fmt.Fprintf(&report, "all: p50 %s p99 %s\n", percentile(ls, 0.5).Round(time.Millisecond), percentile(ls, 0.99).Round(time.Millisecond))
	fmt.Fprintf(&report, "start: %s\nend:   %s (%s after the last session, %d messages not yet handled)\n", before, after, idle.Round(time.Second), after.backlog)
	fmt.Fprintf(&report, "mesh CPU per session: %.1f ms (all roles, miner included)\n", float64((after.cpu-before.cpu).Milliseconds())/float64(max(len(rs), 1)))
	if cpu != nil {
		fmt.Fprintf(&report, "%s\n", formatCPU(cpu, cpuOver))
	}
	// What the mesh keeps per session, by stream (buckets and the object store are streams too):
	// the server's memory per subject and its block caches follow these.
	fmt.Fprintf(&report, "stored at the end (per session of the run):\n")
	for st := range m.c.JS.ListStreams(ctx).Info() {
		n := float64(max(len(rs), 1))
		fmt.Fprintf(&report, "  %-16s %8d msgs %8d subjects %7.1f MB  (%.0f B/session)\n", st.Config.Name, st.State.Msgs,
			st.State.NumSubjects, float64(st.State.Bytes)/(1<<20), float64(st.State.Bytes)/n)
	}
	t.Log("\n" + report.String())

	if n, first := failures(rs); n > 0 {
		t.Errorf("%d of %d sessions did not succeed; first: %s", n, len(rs), first)
	}
	if fmt.Sprint(after.consumers) != fmt.Sprint(before.consumers) {
		t.Errorf("consumers grew: %v -> %v", before.consumers, after.consumers)
	}
	if after.goroutines > before.goroutines+50 {
		t.Errorf("goroutines grew: %d -> %d; the most common now:\n%s", before.goroutines, after.goroutines, topGoroutines(t, m.pprof, 5))
	}
	if firstP50 > 0 && lastP50 > 3*firstP50 {
		t.Errorf("latency grew: p50 %s in the first minute, %s in the last", firstP50, lastP50)
	}
}

func saveHeapProfile(t *testing.T, addr, path string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		t.Fatal(err)
	}
}
