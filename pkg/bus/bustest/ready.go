package bustest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// ReadyTimeout bounds every wait for a part of the mesh to come up: roles start in any order,
// and a loaded CI machine may take tens of seconds to start one.
const ReadyTimeout = time.Minute

// KV opens one of the mesh's buckets once it exists: a mesh takes connections before its
// buckets do (`skein up` listens first, then its roles make what they use).
func KV(t testing.TB, c *bus.Conn, names protocol.Names, bucket string) jetstream.KeyValue {
	t.Helper()
	var kv jetstream.KeyValue
	poll.Eventually(t, ReadyTimeout, "bucket "+bucket, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		kv, err = bus.KV(ctx, c.JS, names, bucket)
		return err
	})
	return kv
}

// waitKey waits until bucket holds key: an executor registers its agent in the agents bucket,
// a toolhost its tools in the tools bucket, each once it is ready to serve them.
func waitKey(t testing.TB, c *bus.Conn, names protocol.Names, bucket, key string) {
	t.Helper()
	kv := KV(t, c, names, bucket)
	poll.Eventually(t, ReadyTimeout, fmt.Sprintf("%q in bucket %s", key, bucket), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := kv.Get(ctx, key)
		return err
	})
}

// WaitAgent waits until an executor has registered agent, so the gateway accepts its tasks.
func WaitAgent(t testing.TB, c *bus.Conn, names protocol.Names, agent string) {
	t.Helper()
	waitKey(t, c, names, protocol.BucketAgents, agent)
}

// WaitTools waits until a toolhost has published every one of tools to the catalog, so that
// an executor offers them: a toolhost probes its sandbox before it publishes.
func WaitTools(t testing.TB, c *bus.Conn, names protocol.Names, tools ...string) {
	t.Helper()
	for _, name := range tools {
		waitKey(t, c, names, protocol.BucketTools, name)
	}
}

// WaitPullers waits until n processes are pulling from agent's shared executor consumer.
func WaitPullers(t testing.TB, c *bus.Conn, names protocol.Names, agent string, n int) {
	t.Helper()
	poll.Eventually(t, ReadyTimeout, fmt.Sprintf("%d executors pulling work for %q", n, agent), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cons, err := c.JS.Consumer(ctx, names.Stream(protocol.StreamWork), names.ExecutorConsumer(agent))
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumWaiting >= n {
			return nil
		}
		leader := ""
		if info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		return fmt.Errorf("%d pull requests waiting, %d pending, leader %q", info.NumWaiting, info.NumPending, leader)
	})
}
