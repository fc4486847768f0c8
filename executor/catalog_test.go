package executor

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tokenize"
	"github.com/skein-mesh/skein/pkg/tools/retrieve"
	"github.com/skein-mesh/skein/pkg/trace"
)

// Recorded figures of the tool-catalogue benchmark (docs/benchmarks.md). The test fails when a
// change makes retrieval worse than this.
const (
	benchTopK = 6
	// recallFloor is the share of needed tools in the first tool set the executor offers, at
	// benchTopK, before any widening (recorded: 46 of 47).
	recallFloor = 0.97
	// inputSavingFloor is how much less input the 36 steps bill with retrieval than with all
	// tools offered, summed over every model call (recorded: 84.6%; the floor leaves 2.6 points).
	inputSavingFloor = 0.82
	// catalogParallel is how many of the benchmark's steps run at once.
	catalogParallel = 4
)

var catalogReport = flag.Bool("catalog.report", false, "print the per-task table of the tool-catalogue benchmark")

// catalogRun is what one benchmark task's step did, read from the model's requests and the trace.
type catalogRun struct {
	task    catalogTask
	first   []string // the tools of the step's first model call, built-ins left out
	carried []string // every tool any model call of the step carried, built-ins left out
	traced  []string // the first set as the trace's offered event lists it
	found   []string // tools find_tools added (the trace's widened events)
	called  []string // tools that ran and answered ok
	turns   int
	input   int64 // input tokens of all the step's model calls
	err     error
}

// TestToolCatalogScenario runs each of the benchmark's 36 tasks as a step of the real executor
// over the 74-tool catalogue (real toolhost, real MiniLM over memoryd's embed endpoint), with
// the scripted model of catalogScript: it calls the tools the task needs, each while it is
// offered, and asks find_tools for one it was not offered. Every task runs twice: with
// retrieval at top_k 6, and with all tools offered. Recall is read from what the model was
// actually sent: before widening, the needed tools in each step's first call; after, those in
// any of its calls. Input tokens are the scripted model's count of each call's whole prompt.
func TestToolCatalogScenario(t *testing.T) {
	m, c := catalogMesh(t, true)
	if len(c.specs) < 60 || len(c.tasks) < 30 {
		t.Fatalf("catalogue of %d tools and %d tasks; the benchmark needs at least 60 and 30", len(c.specs), len(c.tasks))
	}
	script := catalogScript(t, c)
	withRetrieval := runCatalog(t, m, c, script, true)
	allTools := runCatalog(t, m, c, script, false)

	needed, before, after := 0, 0, 0
	var inR, inAll int64
	var b strings.Builder
	b.WriteString("| # | needed | first set (top_k) | found by find_tools | turns (retrieval / all) | input tokens (retrieval / all) |\n|---|---|---|---|---|---|\n")
	for i, r := range withRetrieval {
		a := allTools[i]
		var names []string
		for _, n := range r.task.Needs {
			names = append(names, n.Tool)
			needed++
			if slices.Contains(r.first, n.Tool) {
				before++
			}
			if slices.Contains(r.carried, n.Tool) {
				after++
			}
		}
		inR, inAll = inR+r.input, inAll+a.input
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %d / %d | %d / %d |\n", i+1, strings.Join(names, ", "), strings.Join(r.first, ", "),
			strings.Join(r.found, ", "), r.turns, a.turns, r.input, a.input)
	}
	recall, recallAfter := float64(before)/float64(needed), float64(after)/float64(needed)
	saving := 1 - float64(inR)/float64(inAll)
	summary := fmt.Sprintf("%d tools, %d tasks, %d needed tools, top_k %d: recall %.1f%% before widening (%d/%d), %.1f%% after (%d/%d); "+
		"input tokens per task %d with retrieval vs %d with all tools (mean; %.1f%% less)",
		len(c.specs), len(c.tasks), needed, benchTopK, 100*recall, before, needed, 100*recallAfter, after, needed,
		inR/int64(len(c.tasks)), inAll/int64(len(c.tasks)), 100*saving)
	t.Log(summary)
	if *catalogReport {
		fmt.Println(b.String())
		fmt.Println(summary)
		block := 0
		for _, r := range withRetrieval {
			block += toolBlockTokens(c.specs, r.first)
		}
		fmt.Printf("tool block per call: %d tokens with all tools, %d with the first retrieved set (mean)\n",
			toolBlockTokens(c.specs, c.names()), block/len(withRetrieval))
		topKSweep(t, c, needed)
	}
	if recall < recallFloor {
		t.Errorf("recall before widening %.3f < recorded %.3f", recall, recallFloor)
	}
	if recallAfter < 1 {
		t.Errorf("recall after widening %.3f < 1", recallAfter)
	}
	if saving < inputSavingFloor {
		t.Errorf("input tokens with retrieval %.3f below all tools, under the recorded %.3f", saving, inputSavingFloor)
	}
}

// runCatalog runs every task of the catalogue as a step, with or without retrieval, and checks
// that each step called every tool its task needs.
func runCatalog(t *testing.T, m *mesh, c toolCatalog, script llm.Backend, retrieval bool) []catalogRun {
	t.Helper()
	cfg := retrievalConfig(c)
	cfg.Tools.Retrieval.Enabled = retrieval
	cfg.Tools.Retrieval.TopK = benchTopK
	rec := &recorder{Backend: script}
	x := m.executor(t, cfg, rec)
	variant := map[bool]string{true: "retrieval", false: "all"}[retrieval]
	runs := make([]catalogRun, len(c.tasks))
	run := func(i int) {
		runs[i] = runCatalogTask(m, x, cfg.Agent.Name, fmt.Sprintf("catalog-%s-%02d", variant, i+1), c.tasks[i])
	}
	// The first step embeds the catalogue; the others then find it cached.
	run(0)
	var wg sync.WaitGroup
	sem := make(chan struct{}, catalogParallel)
	for i := 1; i < len(c.tasks); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			run(i)
		}()
	}
	wg.Wait()

	// What the model was sent, by task: the executor's prompt starts with the step's task.
	byTask := map[string]int{}
	for i, task := range c.tasks {
		byTask[task.Task] = i
	}
	seen := make([]bool, len(runs))
	for _, req := range rec.requests() {
		i, ok := byTask[req.Messages[0].Content[0].Text]
		if !ok {
			t.Fatalf("a model call of no benchmark task: %.80q", req.Messages[0].Content[0].Text)
		}
		var names []string
		for _, n := range toolNamesOf(req) {
			if !protocol.Builtin(n) {
				names = append(names, n)
			}
		}
		if !seen[i] {
			seen[i], runs[i].first = true, names
		}
		for _, n := range names {
			if !slices.Contains(runs[i].carried, n) {
				runs[i].carried = append(runs[i].carried, n)
			}
		}
	}
	for i, r := range runs {
		if r.err != nil {
			t.Errorf("%s task %d: %v", variant, i+1, r.err)
			continue
		}
		for _, n := range r.task.Needs {
			if !slices.Contains(r.called, n.Tool) {
				t.Errorf("%s task %d: %s was not called (first set %v, found %v, called %v)", variant, i+1, n.Tool, r.first, r.found, r.called)
			}
		}
		if retrieval && !slices.Equal(r.traced, r.first) {
			t.Errorf("retrieval, task %d: the trace says %v was offered, the model got %v", i+1, r.traced, r.first)
		}
		if !retrieval && len(r.first) != len(c.specs) {
			t.Errorf("all tools, task %d: the first call carried %d tools, want %d", i+1, len(r.first), len(c.specs))
		}
	}
	return runs
}

// runCatalogTask runs one task as a step and reads what it did from its trace.
func runCatalogTask(m *mesh, x *Executor, agent, session string, task catalogTask) catalogRun {
	out := catalogRun{task: task}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := protocol.Step{SessionID: session, StepID: "step-1", Agent: agent, Task: task.Task}
	res := x.RunStep(ctx, st)
	out.turns, out.input = res.Turns, res.Usage.InputTokens
	if res.Outcome != protocol.OutcomeSuccess {
		out.err = fmt.Errorf("outcome %s after %d turns (%s)", res.Outcome, res.Turns, res.Reason)
		return out
	}
	if err := x.trace.Flush(ctx); err != nil {
		out.err = fmt.Errorf("flush trace: %w", err)
		return out
	}
	evs, err := trace.Read(ctx, m.Conn.JS, m.Names, session)
	if err != nil {
		out.err = fmt.Errorf("read trace: %w", err)
		return out
	}
	for _, e := range toolsEvents(evs, "widened") {
		if e.Attrs["by"] == protocol.ToolFindTools {
			out.found = append(out.found, e.Tools...)
		}
	}
	for _, e := range sessiontest.Of(evs, protocol.EvToolCall, "") {
		if e.Result != nil && e.Result.OK && !protocol.Builtin(e.Tool) {
			out.called = append(out.called, e.Tool)
		}
	}
	if off := toolsEvents(evs, "offered"); len(off) == 1 {
		// The trace must say what the model was sent; runCatalog compares it with the requests.
		out.traced = off[0].Tools
	}
	return out
}

// topKSweep prints the recall of the first set at other sizes, for choosing top_k. It ranks with
// pkg/tools/retrieve directly (the executor's ranker and embedder), without running steps.
func topKSweep(t *testing.T, c toolCatalog, needed int) {
	r := retrieve.New(retrieve.FromEmbedder(realEmbedder(t)), 0)
	for _, k := range []int{2, 3, 4, 6, 8, 10} {
		hit := 0
		for _, task := range c.tasks {
			res := r.Rank(context.Background(), task.Task, c.specs, retrieve.Options{TopK: k})
			for _, n := range task.Needs {
				if slices.Contains(res.Offered, n.Tool) {
					hit++
				}
			}
		}
		fmt.Printf("top_k %d: recall %.1f%% (%d/%d)\n", k, 100*float64(hit)/float64(needed), hit, needed)
	}
}

// toolBlockTokens counts the tool definitions of names as the provider reads them.
func toolBlockTokens(specs []protocol.ToolSpec, names []string) int {
	n := 0
	for _, s := range specs {
		if slices.Contains(names, s.Name) {
			n += tokenize.Count(s.Name) + tokenize.Count(s.Description) + tokenize.Count(string(s.InputSchema))
		}
	}
	return n
}
