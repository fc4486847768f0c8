//go:build linux

package tools

import (
	"os"
	"testing"
	"time"
)

// go test -run '^$' -bench CallNamespace ./tools/: a call's own mount namespace, made on the
// forker thread and left (what a start adds before the fork), and let go of afterwards (its
// teardown, which a host does after the reply).
func BenchmarkCallNamespace(b *testing.B) {
	if err := probeMountNS(); err != nil {
		b.Skipf("no mount namespace per call here: %v", err)
	}
	scratch := b.TempDir()
	var teardown time.Duration
	b.ResetTimer()
	for range b.N {
		n := newCallNS(scratch, 64)
		var err error
		onForker(func() {
			var entered bool
			entered, err = n.enter()
			if entered {
				if lerr := leaveCallNS(); lerr != nil {
					err = lerr
				}
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		begin := time.Now()
		n.release()
		teardown += time.Since(begin)
	}
	b.ReportMetric(float64(teardown.Nanoseconds())/float64(b.N), "teardown-ns/op")
	_ = os.Remove(scratch)
}
