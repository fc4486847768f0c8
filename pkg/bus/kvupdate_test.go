package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func counterKV(t *testing.T) (context.Context, jetstream.KeyValue) {
	t.Helper()
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	kv, err := m.Conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "counter"})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, kv
}

// increment is a change that adds one to a decimal counter (absent: 0).
func increment(cur jetstream.KeyValueEntry) ([]byte, error) {
	n := 0
	if cur != nil {
		var err error
		if n, err = strconv.Atoi(string(cur.Value())); err != nil {
			return nil, err
		}
	}
	return []byte(strconv.Itoa(n + 1)), nil
}

// Writers racing on one key each lose some writes; every increment still lands exactly once.
func TestUpdateKVAddsUpConcurrentWriters(t *testing.T) {
	ctx, kv := counterKV(t)
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for range writers {
		wg.Go(func() {
			for range each {
				if _, err := bus.UpdateKV(ctx, kv, "n", increment); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e, err := kv.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(e.Value()); got != strconv.Itoa(writers*each) {
		t.Errorf("counter is %s after %d increments", got, writers*each)
	}
}

// An absent key (never written, or deleted) is created; ErrKeep writes nothing and answers the
// revision read.
func TestUpdateKVCreatesAbsentKeysAndKeepsWhenAsked(t *testing.T) {
	ctx, kv := counterKV(t)
	var sawAbsent bool
	rev, err := bus.UpdateKV(ctx, kv, "k", func(cur jetstream.KeyValueEntry) ([]byte, error) {
		sawAbsent = cur == nil
		return increment(cur)
	})
	if err != nil || !sawAbsent || rev == 0 {
		t.Fatalf("first write: rev %d, err %v, change saw an absent key: %v", rev, err, sawAbsent)
	}
	kept, err := bus.UpdateKV(ctx, kv, "k", func(jetstream.KeyValueEntry) ([]byte, error) { return nil, bus.ErrKeep })
	if err != nil || kept != rev {
		t.Fatalf("keep: rev %d, err %v; want the revision read, %d", kept, err, rev)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || e.Revision() != rev {
		t.Fatalf("after keep the key is at %v (%v), want revision %d untouched", e, err, rev)
	}
	if kept, err := bus.UpdateKV(ctx, kv, "none", func(jetstream.KeyValueEntry) ([]byte, error) { return nil, bus.ErrKeep }); err != nil || kept != 0 {
		t.Fatalf("keep of an absent key: rev %d, err %v; want 0", kept, err)
	}
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	sawAbsent = false
	if _, err := bus.UpdateKV(ctx, kv, "k", func(cur jetstream.KeyValueEntry) ([]byte, error) {
		sawAbsent = cur == nil
		return increment(cur)
	}); err != nil || !sawAbsent {
		t.Fatalf("write after delete: %v, change saw an absent key: %v", err, sawAbsent)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "1" {
		t.Fatalf("after delete and write: %v (%v), want 1", e, err)
	}
}

// Only a lost write is tried again, and not forever: a key another writer changes before every
// write of ours fails with a conflict code after the bound; change's own error ends it at once.
func TestUpdateKVRetriesOnlyConflictsAndGivesUp(t *testing.T) {
	ctx, kv := counterKV(t)
	own := errors.New("refused by change")
	calls := 0
	_, err := bus.UpdateKV(ctx, kv, "k", func(jetstream.KeyValueEntry) ([]byte, error) { calls++; return nil, own })
	if err != own || calls != 1 {
		t.Fatalf("change's error: %v after %d calls; want it unwrapped after one", err, calls)
	}

	calls = 0
	_, err = bus.UpdateKV(ctx, kv, "k", func(cur jetstream.KeyValueEntry) ([]byte, error) {
		calls++
		if _, err := kv.Put(ctx, "k", []byte("rival")); err != nil { // a rival writes between our read and write
			return nil, err
		}
		return []byte("ours"), nil
	})
	if protocol.CodeOf(err) != protocol.CodeConflict {
		t.Fatalf("a key that always changes under us: %v; want a %s error", err, protocol.CodeConflict)
	}
	if calls != 32 {
		t.Errorf("change ran %d times; want 32 (the bound)", calls)
	}

	// A read that fails for another reason is not tried again either.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	calls = 0
	_, err = bus.UpdateKV(gone, kv, "k", func(cur jetstream.KeyValueEntry) ([]byte, error) { calls++; return increment(cur) })
	if !errors.Is(err, context.Canceled) || calls != 0 {
		t.Fatalf("with the context ended: %v after %d calls of change; want the read's error at once", err, calls)
	}
}

// Every way JetStream says a compare-and-set write lost is a conflict, the replicated stream's
// code included; nothing else is.
func TestIsConflict(t *testing.T) {
	ctx, kv := counterKV(t)
	rev, err := kv.Create(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	_, createErr := kv.Create(ctx, "k", []byte("2"))
	_, updateErr := kv.Update(ctx, "k", []byte("2"), rev+10)
	_, getErr := kv.Get(ctx, "absent")
	replicated := fmt.Errorf("write: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant})
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"create of an existing key", createErr, true},
		{"update at a stale revision", updateErr, true},
		{"a replicated stream's wrong last sequence", replicated, true},
		{"a missing key", getErr, false},
		{"no leader", jetstream.ErrNoStreamResponse, false},
		{"nil", nil, false},
	} {
		if got := bus.IsConflict(c.err); got != c.want {
			t.Errorf("%s (%v): IsConflict = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
