package e2e

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
)

var (
	scalingRun      = flag.Bool("scaling", false, "run TestExecutorScaling (make bench-scaling)")
	scalingWindow   = flag.Duration("scaling.window", 30*time.Second, "how long each executor count is measured")
	scalingStepConc = flag.Int("scaling.concurrency", 4, "executor.concurrency of every executor in the run")
)

// Every session makes one call of nap, a tool that sleeps 1 s: the work is I/O-bound, so
// throughput should follow the number of executor slots.
const scalingScript = `
rules:
  - when: {last: "^nap"}
    reply:
      tool_calls:
        - {name: nap, args: {}}
  - reply: {text: "Rested."}
`

// TestExecutorScaling measures sessions/s with 1 and then 8 executors (the one inside `skein up`
// plus 7 executor processes) on one mesh, each running scaling.concurrency steps at once, with a
// load that keeps every slot busy.
func TestExecutorScaling(t *testing.T) {
	if !*scalingRun {
		t.Skip("benchmark: run with -scaling (make bench-scaling)")
	}
	conc := *scalingStepConc
	agent := fmt.Sprintf(assistantAgent+`tools:
  manifest_dirs: [$TESTTOOLS]
  enabled: [nap]
executor:
  concurrency: %d
toolhost:
  concurrency: 256
memory:
  enabled: false
`, conc)
	cfg := writeProject(t, agent, scalingScript)
	m := startUp(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	task := func(i int) string { return fmt.Sprintf("nap please (%d)", i) }

	measure := func(executors int) (float64, []sessionResult) {
		window := *scalingWindow
		// Twice as many sessions in flight as there are slots: every slot stays busy.
		begin := time.Now()
		rs := generate(ctx, m.c, 2*executors*conc, 0, begin.Add(window), task)
		// Count what finished inside the window after a short ramp-up; the drain after it
		// (sessions still queued when submitting stopped) is not throughput.
		ramp := min(5*time.Second, window/4)
		n := 0
		for _, r := range rs {
			if d := r.end.Sub(begin); d >= ramp && d <= window {
				n++
			}
		}
		return float64(n) / (window - ramp).Seconds(), rs
	}

	var lines []string
	var rates []float64
	var extra []*proc // executor processes besides the one inside skein up
	cpuOf := func() (up, execs time.Duration) {
		_, up = procUsage(m.p.cmd.Process.Pid)
		for _, p := range extra {
			_, c := procUsage(p.cmd.Process.Pid)
			execs += c
		}
		return up, execs
	}
	for _, n := range []int{1, 8} {
		for len(extra)+1 < n {
			extra = append(extra, start(t, cliEnv(t, t.TempDir()), fmt.Sprintf("executor-%d", len(extra)+2), "executor",
				"--nats", m.url, "--config", cfg))
		}
		bustest.WaitPullers(t, m.c, meshNames, "assistant", n)
		up0, ex0 := cpuOf()
		rate, rs := measure(n)
		up1, ex1 := cpuOf()
		if bad, first := failures(rs); bad > 0 {
			t.Fatalf("%d executors: %d of %d sessions failed; first: %s", n, bad, len(rs), first)
		}
		ls := latencies(rs)
		rates = append(rates, rate)
		lines = append(lines, fmt.Sprintf("%d executor(s) × %d steps: %.2f sessions/s, p50 %s, p99 %s (%d sessions); CPU per session: skein up %.1f ms, executor processes %.1f ms",
			n, conc, rate, percentile(ls, 0.5).Round(time.Millisecond), percentile(ls, 0.99).Round(time.Millisecond), len(rs),
			float64((up1-up0).Microseconds())/1000/float64(len(rs)), float64((ex1-ex0).Microseconds())/1000/float64(len(rs))))
	}
	t.Logf("\nscaling on a 1 s I/O-bound tool\n  %s\n  1→8 executors: %.1f×", strings.Join(lines, "\n  "), rates[len(rates)-1]/rates[0])
}
