package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
	"github.com/skein-mesh/skein/pkg/toon"
)

// hostileTexts are texts of about n bytes that cost time quadratic in their length in a naive
// tokenizer or renderer: one run of one character, random code points, deep nesting.
func hostileTexts(n int) map[string]string {
	r := rand.New(rand.NewSource(int64(n)))
	var random strings.Builder
	for random.Len() < n {
		if c := rune(r.Intn(0x10FFFF)); utf8.ValidRune(c) {
			random.WriteRune(c)
		}
	}
	return map[string]string{
		"one_letter":     strings.Repeat("a", n),
		"spaces":         "x" + strings.Repeat(" ", n) + "x",
		"random_Unicode": random.String(),
		"deep_JSON":      strings.Repeat(`{"a":[`, n/8) + strings.Repeat("]}", n/8),
	}
}

var sizes = []int{60_000, 120_000, 240_000}

// BenchmarkStepTaskSize runs one step (scripted model: one turn, no tools) whose task is a
// hostile text, and reports the CPU the whole process spends on it: executor, trace publishing
// and the embedded NATS server. Each iteration's task is new, so no count is remembered.
func BenchmarkStepTaskSize(b *testing.B) {
	m := bustest.Start(b)
	cfg := testConfig(b.TempDir())
	cfg.LLM.ContextWindow = 1_000_000 // every size is run, none refused as over the window
	x := newExecutor(b, m, cfg, scriptBackend(b, "rules:\n  - reply: {text: done}\n"), quiet())
	benchHostileTexts(b, func(b *testing.B, i int, _, text string) {
		st := protocol.Step{SessionID: fmt.Sprintf("s-%d", i), StepID: "step-1", Agent: cfg.Agent.Name,
			Task: fmt.Sprintf("%d\n", i) + text}
		if res := x.RunStep(context.Background(), st); res.Outcome != protocol.OutcomeSuccess {
			b.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
		}
	})
}

// benchHostileTexts runs a sub-benchmark for each hostile text of each size, which calls once
// for every iteration, with a number no other iteration has, and reports the CPU the whole
// process spent.
func benchHostileTexts(b *testing.B, once func(b *testing.B, i int, name, text string)) {
	tokenize.Count("load the vocabulary before the clock starts")
	i := 0
	for _, n := range sizes {
		texts := hostileTexts(n)
		for _, name := range slices.Sorted(maps.Keys(texts)) {
			text := texts[name]
			b.Run(fmt.Sprintf("%s/%dKB", name, n/1000), func(b *testing.B) {
				c0 := devtest.CPUTime()
				for b.Loop() {
					i++
					once(b, i, name, text)
				}
				devtest.ReportCPU(b, c0)
			})
		}
	}
}

// BenchmarkRenderResult renders a hostile tool result the way render and bound do (the format,
// its token count, and the head-and-tail view of a result over the default 4000-token cap),
// without storing it.
func BenchmarkRenderResult(b *testing.B) {
	benchHostileTexts(b, func(b *testing.B, i int, name, text string) {
		str, _ := json.Marshal(text)
		payload := []byte(fmt.Sprintf(`{"n":%d,"text":%s}`, i, str))
		if name == "deep_JSON" {
			payload = []byte(fmt.Sprintf(`{"n":%d,"tree":%s}`, i, text))
		}
		out := formatPayload(payload, "toon")
		if tokenize.Count(out) > 4000 {
			head := toon.NewObject(1)
			head.Set("bytes", num(len(payload)))
			headTailView(payload, head, 4000, "toon")
		}
	})
}
