package executor

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// A catalog read that fails for a moment (on a cluster, the tools bucket's stream electing a
// leader after a node died) is read again within the grace period instead of failing the step.
// Here the bucket is gone for half a second and comes back with the same entries.
func TestCatalogReadThatFailsForAMomentIsRetried(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	cfg := testConfig(testdata(t, "tools"), testTools...)
	x := m.executor(t, cfg, scriptBackend(t, "rules:\n  - reply: {text: \"done\"}\n"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	saved := map[string][]byte{}
	poll.True(t, 30*time.Second, "the toolhost to publish every test tool", func() bool {
		for _, name := range testTools {
			if e, err := kv.Get(ctx, name); err == nil {
				saved[name] = e.Value()
			}
		}
		return len(saved) == len(testTools)
	})
	bucket := m.Names.Bucket(protocol.BucketTools)
	if err := m.Conn.JS.DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	back := make(chan error, 1)
	go func() {
		// fault injection: the outage lasts a fixed half second, shorter than the executor's
		// grace period for a catalog read; the step starts during it.
		time.Sleep(500 * time.Millisecond)
		kv, err := m.Conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket})
		for name, v := range saved {
			if err == nil {
				_, err = kv.Put(ctx, name, v)
			}
		}
		back <- err
	}()

	res, evs := m.runStep(t, x, step(t, cfg, "say done"))
	if err := <-back; err != nil {
		t.Fatalf("put the bucket back: %v", err)
	}
	if res.Outcome != protocol.OutcomeSuccess || res.FinalText != "done" {
		t.Fatalf("outcome %s %q (%s), want success: the catalog read should have been retried", res.Outcome, res.FinalText, res.Reason)
	}
	if len(sessiontest.Of(evs, protocol.EvStepFinished, "")) != 1 {
		t.Fatalf("want one step_finished event, got %+v", evs)
	}
}
