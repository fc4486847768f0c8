package executor

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
	"github.com/skein-mesh/skein/pkg/tools/retrieve"
)

// Recorded figures of the tool-catalogue benchmark (docs/benchmarks.md). The test fails when a
// change makes retrieval worse than this.
const (
	benchTopK = 6
	// recallFloor is the share of needed tools offered before any widening, at benchTopK
	// (recorded: 46 of 47).
	recallFloor = 0.97
)

var catalogReport = flag.Bool("catalog.report", false, "print the per-task table of the tool-catalogue benchmark")

// TestToolRetrievalRecall ranks the 74-tool catalogue for each of the benchmark's tasks with
// the real MiniLM embedder and BM25, and checks that the tools each task needs are offered at
// top_k (before widening), and that find_tools finds the rest (after widening). It also counts
// the tokens of the tool block each task's model call carries with retrieval and with all tools.
func TestToolRetrievalRecall(t *testing.T) {
	c := loadCatalog(t)
	emb := realEmbedder(t)
	if len(c.specs) < 60 || len(c.tasks) < 30 {
		t.Fatalf("catalogue of %d tools and %d tasks; the benchmark needs at least 60 and 30", len(c.specs), len(c.tasks))
	}
	r := retrieve.New(retrieve.FromEmbedder(emb), 0)
	ctx := context.Background()
	allTokens := toolBlockTokens(c.specs, c.names())

	needed, before, after := 0, 0, 0
	var offeredTokens int
	var b strings.Builder
	b.WriteString("| # | needed | offered at top_k | missed | found by find_tools | tool tokens (retrieval / all) |\n|---|---|---|---|---|---|\n")
	for i, task := range c.tasks {
		res := r.Rank(ctx, task.Task, c.specs, retrieve.Options{TopK: benchTopK})
		if res.Mode != "hybrid" {
			t.Fatalf("task %d ranked in %s mode: %v", i, res.Mode, res.Err)
		}
		again := r.Rank(ctx, task.Task, c.specs, retrieve.Options{TopK: benchTopK})
		if !slices.Equal(res.Offered, again.Offered) {
			t.Fatalf("task %d: two rankings of the same input differ: %v vs %v", i, res.Offered, again.Offered)
		}
		var missed, found, names []string
		for _, n := range task.Needs {
			names = append(names, n.Tool)
			needed++
			if slices.Contains(res.Offered, n.Tool) {
				before++
				after++
				continue
			}
			missed = append(missed, n.Tool)
			hits, _ := r.Search(ctx, n.Find, c.specs, res.Offered, findToolsLimit)
			if slices.Contains(hits, n.Tool) {
				after++
				found = append(found, n.Tool)
			} else {
				t.Errorf("task %d: %s is neither offered (%v) nor found by find_tools(%q) (%v)", i, n.Tool, res.Offered, n.Find, hits)
			}
		}
		tk := toolBlockTokens(c.specs, res.Offered)
		offeredTokens += tk
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %d / %d |\n", i+1, strings.Join(names, ", "), strings.Join(res.Offered, ", "),
			strings.Join(missed, ", "), strings.Join(found, ", "), tk, allTokens)
	}
	recall, recallAfter := float64(before)/float64(needed), float64(after)/float64(needed)
	summary := fmt.Sprintf("%d tools, %d tasks, %d needed tools, top_k %d: recall %.1f%% before widening (%d/%d), %.1f%% after; "+
		"tool block %d tokens per call with retrieval (mean) vs %d with all tools (%.1f%% less)",
		len(c.specs), len(c.tasks), needed, benchTopK, 100*recall, before, needed, 100*recallAfter,
		offeredTokens/len(c.tasks), allTokens, 100*(1-float64(offeredTokens)/float64(len(c.tasks)*allTokens)))
	t.Log(summary)
	if *catalogReport {
		fmt.Println(b.String())
		fmt.Println(summary)
		// Recall at other sizes, for choosing top_k.
		for _, k := range []int{2, 3, 4, 6, 8, 10} {
			hit := 0
			for _, task := range c.tasks {
				res := r.Rank(ctx, task.Task, c.specs, retrieve.Options{TopK: k})
				for _, n := range task.Needs {
					if slices.Contains(res.Offered, n.Tool) {
						hit++
					}
				}
			}
			fmt.Printf("top_k %d: recall %.1f%% (%d/%d)\n", k, 100*float64(hit)/float64(needed), hit, needed)
		}
	}
	if recall < recallFloor {
		t.Errorf("recall before widening %.3f < recorded %.3f", recall, recallFloor)
	}
	if recallAfter < 1 {
		t.Errorf("recall after widening %.3f < 1", recallAfter)
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
