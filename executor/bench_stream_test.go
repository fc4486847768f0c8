package executor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/delta"
	"github.com/skein-mesh/skein/pkg/llm/llmtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// BenchmarkStreamFirstDelta runs one step whose model (the Anthropic fake, spoken to by the
// official SDK) streams a 60-word answer slowly, a word per chunk_ms, and reports, as medians
// over the iterations, when a reader of the session's delta subject saw the first piece of the
// answer (first_delta_ms) and when the step's whole answer was there (whole_ms), both counted
// from the step's start: what streaming saves a person waiting on a long answer.
func BenchmarkStreamFirstDelta(b *testing.B) {
	answer := strings.TrimSpace(strings.Repeat("The mesh streams this answer while the model is still writing it. ", 6))
	for _, chunk := range []time.Duration{10 * time.Millisecond, 40 * time.Millisecond} {
		b.Run(fmt.Sprintf("chunk_ms=%d", chunk.Milliseconds()), func(b *testing.B) {
			m := bustest.Start(b)
			fake := llmtest.NewAnthropic(b, llmtest.Script{Respond: func(llmtest.Request) llmtest.Reply {
				return llmtest.Reply{Text: answer, ChunkDelay: chunk}
			}})
			cfg := testConfig(b.TempDir())
			cfg.LLM.BaseURL, cfg.LLM.APIKeyEnv = fake.URL, "SKEIN_BENCH_ANTHROPIC_KEY"
			b.Setenv(cfg.LLM.APIKeyEnv, "sk-ant-test")
			x := newExecutor(b, m, cfg, nil, quiet())
			reader := m.Connect(b, "reader")
			var first, whole []float64
			i := 0
			for b.Loop() {
				i++
				st := protocol.Step{SessionID: fmt.Sprintf("s-%d", i), StepID: "step-1", Agent: cfg.Agent.Name, Task: "explain"}
				var once sync.Once
				var firstAt time.Time
				sub, err := delta.Follow(reader.NC, m.Names, st.SessionID, func(d protocol.Delta) {
					if d.Text != "" {
						once.Do(func() { firstAt = time.Now() })
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				res := x.RunStep(context.Background(), st)
				end := time.Now()
				_ = sub.Unsubscribe()
				if res.Outcome != protocol.OutcomeSuccess || res.FinalText != answer {
					b.Fatalf("outcome %s (%s), text %q", res.Outcome, res.Reason, res.FinalText)
				}
				once.Do(func() { b.Fatal("no delta reached the reader") })
				first = append(first, float64(firstAt.Sub(start).Microseconds())/1000)
				whole = append(whole, float64(end.Sub(start).Microseconds())/1000)
			}
			b.ReportMetric(median(first), "first_delta_ms")
			b.ReportMetric(median(whole), "whole_ms")
			b.ReportMetric(0, "ns/op") // the step's length is the fake's pacing: the figures above are the result
		})
	}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
