package gate_test

import (
	"context"
	"testing"

	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/memory/gate/gatetest"
)

// BenchmarkRulesPerLesson is what the gate's rules cost for one lesson (no judge, no cache): every
// text of the corpus in turn.
func BenchmarkRulesPerLesson(b *testing.B) {
	c, err := gatetest.LoadCorpus()
	if err != nil {
		b.Fatal(err)
	}
	var ls []gate.Lesson
	for _, inj := range c.Injections {
		for _, s := range inj.Sessions {
			ls = append(ls, lesson(c, s, inj.Tools, inj.Seen))
		}
	}
	for _, o := range c.Ordinary {
		ls = append(ls, lesson(c, o.Text, o.Tools, o.Seen))
	}
	var g gate.Gate // no cache
	ctx := context.Background()
	i := 0
	for b.Loop() {
		g.Check(ctx, ls[i%len(ls)])
		i++
	}
}
