package memoryd_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// BenchmarkRetrieveOverBus is what an executor waits for: a retrieve request over NATS to
// memoryd, which embeds the task with all-MiniLM-L6-v2 and searches 1,000 entries in the KV
// store. It reports p50 and p99 besides the mean.
func BenchmarkRetrieveOverBus(b *testing.B) {
	if _, err := minilm.Open(minilm.Options{}); err != nil {
		b.Skipf("all-MiniLM-L6-v2 not installed (run `make setup`): %v", err)
	}
	m := bustest.Start(b)
	c := start(b, m, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tools := []string{"csv_read", "list_files", "http_get", "shell", "git"}
	var es []memory.Entry
	for i := range 1000 {
		es = append(es, memory.Entry{Agent: "demo", Polarity: []protocol.Polarity{protocol.PolarityAvoid, protocol.PolarityPattern}[i%2],
			Tier: []protocol.Tier{protocol.TierTactical, protocol.TierStrategic}[min(i%10, 1)],
			Text: fmt.Sprintf("Guideline %d: check the arguments of %s before calling it, case %d", i, tools[i%len(tools)], i*7), Tools: []string{tools[i%len(tools)]}})
	}
	for i := 0; i < len(es); i += 100 {
		if _, err := c.Import(ctx, protocol.MemoryImportRequest{Entries: es[i : i+100]}); err != nil {
			b.Fatal(err)
		}
	}
	req := protocol.RetrieveRequest{Agent: "demo", Task: "Summarize the sales in /data/x.csv with csv_read", Tools: tools}
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.Retrieve(ctx, req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
