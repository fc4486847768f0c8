package tokenize

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// BenchmarkCount counts adversarial texts (and ordinary text, for scale) of 60, 120 and 240 KB
// without the memo: the CPU per op should double with the size, not quadruple.
func BenchmarkCount(b *testing.B) {
	encoder()
	for _, n := range []int{60_000, 120_000, 240_000} {
		texts := adversarial(n)
		texts["ordinary text"] = strings.Repeat("The quick brown fox's 3 jumps over the lazy dog; it's 10:45.\n", n/62)
		for _, name := range slices.Sorted(maps.Keys(texts)) {
			s := texts[name]
			b.Run(fmt.Sprintf("%s/%dKB", strings.ReplaceAll(name, " ", "_"), n/1000), func(b *testing.B) {
				c0 := devtest.CPUTime()
				for b.Loop() {
					count(s)
				}
				devtest.ReportCPU(b, c0)
			})
		}
	}
}
