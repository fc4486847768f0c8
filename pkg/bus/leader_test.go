package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A write to a stream without a leader is tried again until the stream answers; any other
// error, and the end of the context, end the tries with the operation's own error.
func TestWritesAreTriedAgainWhileTheStreamHasNoLeader(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", Names: protocol.NewNames("")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, srv.URL(), "leader-test", 5*time.Second, bus.WithInProcess(srv.Server))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The bucket appears only after the first tries: until then nothing answers on its
	// subjects, as when its stream has no leader.
	tries := 0
	var kv jetstream.KeyValue
	err = bus.WhileNoLeader(ctx, func() error {
		tries++
		if tries == 3 {
			var err error
			if kv, err = c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leader"}); err != nil {
				return err
			}
		}
		if kv == nil {
			_, err := c.JS.Publish(ctx, "$KV.leader.k", []byte("v"), jetstream.WithRetryAttempts(0))
			return err
		}
		_, err := kv.Create(ctx, "k", []byte("v"))
		return err
	})
	if err != nil || tries != 3 {
		t.Fatalf("after %d tries: %v; want the write stored on the third", tries, err)
	}

	// Any other error is final: the key exists now.
	tries = 0
	err = bus.WhileNoLeader(ctx, func() error { tries++; _, err := kv.Create(ctx, "k", []byte("v")); return err })
	if !errors.Is(err, jetstream.ErrKeyExists) || tries != 1 {
		t.Errorf("after %d tries: %v; want ErrKeyExists at once", tries, err)
	}

	// The context bounds the tries, and the error says why they failed.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	tries = 0
	err = bus.WhileNoLeader(short, func() error {
		tries++
		return fmt.Errorf("create: %w", jetstream.ErrNoStreamResponse)
	})
	if !bus.NoLeader(err) || tries < 2 {
		t.Errorf("after %d tries: %v; want several tries and the no-leader error", tries, err)
	}
}
