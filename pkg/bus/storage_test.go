package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
)

// The server's own refusals for want of storage are recognised by their codes: a stream asking
// more than the server may store (10047), a full work queue refusing a message (10077); other
// refusals are not.
func TestStorageRefusalsAreKnownByTheirCodes(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", MaxStore: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, srv.URL(), "codes-test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	_, err = c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, MaxBytes: 64 << 20})
	if !bus.IsStorageFull(err) {
		t.Errorf("a stream over the server's store limit: %v, want a storage refusal", err)
	}
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.>"}, MaxMsgs: 1,
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.Publish(ctx, "q.a", []byte("one")); err != nil {
		t.Fatal(err)
	}
	_, err = c.JS.Publish(ctx, "q.b", []byte("two"))
	if !bus.IsStorageFull(err) {
		t.Errorf("a message into a full work queue: %v, want a storage refusal", err)
	}
	_, err = c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "Q2", Subjects: []string{"q.>"}})
	if err == nil || bus.IsStorageFull(err) {
		t.Errorf("subjects that overlap another stream's: %v, want a refusal that is not about storage", err)
	}
}
