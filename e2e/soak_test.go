package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

var soakDuration = flag.Duration("soak.duration", 0, "run TestSoak for this long (default $SKEIN_SOAK_DURATION, else skipped)")

// The soak's agent: a short session, one call of the compiled sum tool, memory and miner on.
const soakAgent = assistantAgent + `tools:
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
// minutes by default there) and reports, per minute, sessions/s and latency percentiles; every
// SKEIN_SOAK_SAMPLE (20 s) the live heap by holder (the NATS server and parts of it, each role:
// heapHolders) and the process's RSS; and at start and end consumers per stream, goroutines
// and what each stream stores.
//
// Every per-session record is kept for SKEIN_SOAK_RETENTION (2m; "default" keeps the mesh's
// own limits, days), so that memory levels off once retention removes as much as arrives; after
// SKEIN_SOAK_WARMUP (retention + 2m, at least half the run) the heap, the RSS and each holder
// must stay within 10% of their level just after warm-up. It also fails when a session fails,
// when consumers or goroutines grow, or when the last minute's p50 is far above the first's.
func TestSoak(t *testing.T) {
	d := *soakDuration
	if d == 0 {
		d = envDuration(t, "SKEIN_SOAK_DURATION", 0)
	}
	if d == 0 {
		t.Skip("soak run: set -soak.duration or SKEIN_SOAK_DURATION (make soak)")
	}
	workers := 4
	if v := os.Getenv("SKEIN_SOAK_WORKERS"); v != "" {
		fmt.Sscan(v, &workers)
	}
	// The retention sets each stream's max_age, the session, tool call and step TTLs and the
	// dedup window: what the mesh keeps per session, and so the server's memory for it.
	retention := 2 * time.Minute
	if v := os.Getenv("SKEIN_SOAK_RETENTION"); v == "default" {
		retention = 0
	} else if v != "" {
		retention = envDuration(t, "SKEIN_SOAK_RETENTION", 0)
	}
	// Warm-up: the retention fills, the per-block state of the first blocks expires (2 minutes
	// after their last use), memoryd's embedding cache fills (4096 texts), and the cache of each
	// stream's block being written grows until the block is full (8 MiB, 4 MiB for a bucket):
	// minutes at 60 sessions/s, 10-20 at 8/s. A slow run needs a longer SKEIN_SOAK_WARMUP.
	warmup := envDuration(t, "SKEIN_SOAK_WARMUP", max(retention+2*time.Minute, d/2))
	every := envDuration(t, "SKEIN_SOAK_SAMPLE", 20*time.Second)
	// The server's memory follows the sessions retained and the rate blocks are written at, so
	// on a machine whose load changes (shared cores) a run paced below its capacity
	// (SKEIN_SOAK_RATE sessions/s) compares memory at the same load; unpaced, the workers go as
	// fast as the mesh does.
	var rate float64
	if v := os.Getenv("SKEIN_SOAK_RATE"); v != "" {
		if _, err := fmt.Sscan(v, &rate); err != nil || rate < 0 {
			t.Fatalf("SKEIN_SOAK_RATE=%q: want sessions per second", v)
		}
	}
	agent := soakAgent
	if retention > 0 {
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
`, retention)
	}
	// Heap profiles sample every 64 KiB allocated instead of 512 KiB, so that a role's few MB
	// are measured closely enough to compare.
	t.Setenv("GODEBUG", strings.TrimPrefix(os.Getenv("GODEBUG")+",memprofilerate=65536", ","))
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
	// The miner learns from each session after it ends: the baseline is taken once it has
	// handled the warm-up's (nothing left on any consumer).
	poll.True(t, time.Minute, "the miner to catch up with the warm-up", func() bool {
		_, backlog := m.queues(ctx, t)
		return backlog == 0
	})
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
		// pacing: the profile's stretch starts a third into the run.
		time.Sleep(d / 3)
		cpu = roleCPU(t, m.pprof, cpuOver)
	}()
	var samples []memSample
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for at := every; at <= d; at += every {
			// pacing: a memory sample every `every`, on the run's clock.
			time.Sleep(time.Until(begin.Add(at)))
			samples = append(samples, m.memSample(ctx, t, at))
		}
	}()
	paced := task
	if rate > 0 {
		paced = func(i int) string {
			// pacing: the arrival schedule, session i at i/rate seconds.
			time.Sleep(time.Until(begin.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
			return task(i)
		}
	}
	rs := generate(ctx, m.c, workers, 0, begin.Add(d), paced)
	elapsed := time.Since(begin)
	<-cpuDone
	<-sampled
	// Sessions are done; the miner may still be behind (it learns from each session after it
	// ends), and followers' consumers are deleted after them: "end" is once the mesh is idle,
	// as "start" was, or after a minute.
	// A mesh not idle within the minute is measured as it is: the report counts what it had left.
	_ = poll.Wait(time.Minute, func() error {
		consumers, backlog := m.queues(ctx, t)
		if backlog > 0 || fmt.Sprint(consumers) != fmt.Sprint(before.consumers) {
			return fmt.Errorf("%d messages not yet handled, consumers %v", backlog, consumers)
		}
		return nil
	})
	after := m.stats(ctx, t)
	idle := time.Since(begin.Add(elapsed))

	if path := os.Getenv("SKEIN_SOAK_HEAP_PROFILE"); path != "" {
		saveHeapProfile(t, m.pprof, path) // for `go tool pprof` when the live heap grew
	}
	var report strings.Builder
	pace := ""
	if rate > 0 {
		pace = fmt.Sprintf(" (paced at %.1f)", rate)
	}
	fmt.Fprintf(&report, "soak: %d workers, %s, %d sessions, %.1f sessions/s%s\n", workers, elapsed.Round(time.Second), len(rs), float64(len(rs))/elapsed.Seconds(), pace)
	fmt.Fprintf(&report, "minute  sessions  sessions/s  p50      p99\n")
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
		fmt.Fprintf(&report, "%6d  %8d  %10.1f  %-7s  %-7s\n", i+1, len(bucket), float64(len(bucket))/span.Seconds(),
			p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	}
	ls := latencies(rs)
	fmt.Fprintf(&report, "all: p50 %s p99 %s\n", percentile(ls, 0.5).Round(time.Millisecond), percentile(ls, 0.99).Round(time.Millisecond))
	fmt.Fprintf(&report, "start: %s\nend:   %s (%s after the last session, %d messages not yet handled)\n", before, after, idle.Round(time.Second), after.backlog)
	fmt.Fprintf(&report, "mesh CPU per session: %.1f ms (all roles, miner included)\n", float64((after.cpu-before.cpu).Milliseconds())/float64(max(len(rs), 1)))
	if cpu != nil {
		fmt.Fprintf(&report, "%s\n", formatCPU(cpu, cpuOver))
	}
	ret := "the mesh's defaults"
	if retention > 0 {
		ret = retention.String()
	}
	fmt.Fprintf(&report, "memory (retention %s, warm-up %s):\n%s", ret, warmup, formatMemory(samples, rs, begin, every))
	var flat []string
	settled := memAfter(samples, warmup)
	report.WriteString(perRetainedSession(settled))
	switch {
	case retention == 0:
		fmt.Fprintf(&report, "not checked for flatness: with the mesh's default retention memory grows with every session retained, for days\n")
	case len(settled) < 10:
		fmt.Fprintf(&report, "not checked for flatness: %d samples after the warm-up of %s; run at least %s\n", len(settled), warmup, warmup+10*every)
	default:
		var summary string
		summary, flat = checkFlat(settled)
		report.WriteString(summary)
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

	for _, f := range flat {
		t.Error(f)
	}
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

// memSample is the mesh's memory at one point of a soak.
type memSample struct {
	at       time.Duration // since the start of the run
	heap     heapShares
	rssMB    float64
	retained int // sessions whose trace the mesh keeps (TRACE subjects)
}

func (m *upMesh) memSample(ctx context.Context, t *testing.T, at time.Duration) memSample {
	t.Helper()
	s := memSample{at: at, heap: liveHeap(t, m.pprof)}
	rssKB, _ := procUsage(m.p.cmd.Process.Pid)
	s.rssMB = float64(rssKB) / 1024
	if st, err := m.c.JS.Stream(ctx, m.names.Stream(protocol.StreamTrace)); err == nil {
		if info, err := st.Info(ctx); err == nil {
			s.retained = int(info.State.NumSubjects)
		}
	}
	return s
}

func formatMemory(samples []memSample, rs []sessionResult, begin time.Time, every time.Duration) string {
	var b strings.Builder
	b.WriteString("  at      sessions/s  retained  heap MB  RSS MB")
	for _, h := range heapHolders {
		fmt.Fprintf(&b, "  %s", h)
	}
	b.WriteString("\n")
	for _, s := range samples {
		n := 0
		for _, r := range rs {
			if e := r.end.Sub(begin); e > s.at-every && e <= s.at {
				n++
			}
		}
		fmt.Fprintf(&b, "  %-6s  %10.1f  %8d  %7.1f  %6.0f", s.at, float64(n)/every.Seconds(), s.retained, s.heap.total, s.rssMB)
		for _, h := range heapHolders {
			fmt.Fprintf(&b, "  %*.1f", len(h), s.heap.by[h])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// memAfter returns the samples taken after the warm-up.
func memAfter(samples []memSample, warmup time.Duration) []memSample {
	for i, s := range samples {
		if s.at >= warmup {
			return samples[i:]
		}
	}
	return nil
}

// checkFlat compares, for the heap, the RSS and each holder of the heap, the level at the end of
// the run (median of the last samples) with the level just after warm-up (median of the first),
// and returns a summary and one failure per series that grew by more than 10%
// (a holder also by more than 2 MB: a few MB move with the work in flight).
func checkFlat(settled []memSample) (summary string, grew []string) {
	var b strings.Builder
	level := func(ss []memSample, v func(memSample) float64) float64 {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = v(s)
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	series := []struct {
		name  string
		floor float64
		v     func(memSample) float64
	}{
		{"live heap", 0, func(s memSample) float64 { return s.heap.total }},
		{"RSS", 0, func(s memSample) float64 { return s.rssMB }},
	}
	for _, h := range heapHolders {
		series = append(series, struct {
			name  string
			floor float64
			v     func(memSample) float64
		}{h, 2, func(s memSample) float64 { return s.heap.by[h] }})
	}
	// A quarter of the samples (at least 5) at each end: the server's block caches come and go
	// 10 s after their last use, 8 MiB at a time.
	k := max(5, len(settled)/4)
	first, last := settled[:k], settled[len(settled)-k:]
	fmt.Fprintf(&b, "after warm-up (%s to %s, medians of the first and last %d samples; more than +10%% fails):\n", first[0].at, last[k-1].at, k)
	fromN, toN := level(first, func(s memSample) float64 { return float64(s.retained) }), level(last, func(s memSample) float64 { return float64(s.retained) })
	fmt.Fprintf(&b, "  %-16s %7.0f -> %7.0f\n", "retained", fromN, toN)
	var load string
	if toN > 1.2*fromN {
		load = fmt.Sprintf("; sessions retained grew %.0f -> %.0f with the rate: on a machine whose load changes, pace the run below its capacity (SKEIN_SOAK_RATE)", fromN, toN)
	}
	for _, s := range series {
		from, to := level(first, s.v), level(last, s.v)
		change := 0.0
		if from > 0 {
			change = 100 * (to - from) / from
		}
		fmt.Fprintf(&b, "  %-16s %7.1f -> %7.1f MB  %+5.1f%%\n", s.name, from, to, change)
		if to > 1.1*from && to-from > s.floor {
			grew = append(grew, fmt.Sprintf("%s grew after warm-up: %.1f -> %.1f MB (%+.1f%%)%s", s.name, from, to, change, load))
		}
	}
	return b.String(), grew
}

// perRetainedSession is what the server keeps per session it retains (median over samples): its
// subject index, and the per-block state and message ids of the sessions of the last minutes.
func perRetainedSession(samples []memSample) string {
	var index, recent []float64
	for _, s := range samples {
		if s.retained > 0 {
			index = append(index, s.heap.by["server:subjects"]*(1<<20)/float64(s.retained))
			recent = append(recent, (s.heap.by["server:blocks"]+s.heap.by["server:msg-ids"])*(1<<20)/float64(s.retained))
		}
	}
	if len(index) == 0 {
		return ""
	}
	slices.Sort(index)
	slices.Sort(recent)
	return fmt.Sprintf("server memory per retained session (median of %d samples): subject index %.0f B; per-block subject state and message ids %.0f B\n",
		len(index), index[len(index)/2], recent[len(recent)/2])
}

// envDuration reads a duration from the environment (def when unset).
func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return d
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
