package bus

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// ErrKeep, returned by an UpdateKV change, leaves the key as it is.
var ErrKeep = errors.New("keep the key as it is")

// The bound of UpdateKV: how many writes may lose to another writer, and the wait after a lost
// one (doubling from the first, up to the last, jittered so racing writers spread out). 32
// writes wait about 1.7 s in all: far more than any contention the mesh makes
// (a session tree's executors charging its root's ledger entry at once), short enough that a
// key written in a tight loop by someone else fails the caller rather than stalls it.
const (
	kvWrites    = 32
	kvFirstWait = 2 * time.Millisecond
	kvLastWait  = 64 * time.Millisecond
)

// LeaderWait bounds how long a write waits for a stream to elect a leader (WhileNoLeader):
// an election takes seconds.
const LeaderWait = 10 * time.Second

// UpdateKV changes key with compare-and-set, the one read-modify-write loop of the mesh. It
// reads key and writes what change makes of it: a create when the key is absent, an update at
// the revision read otherwise. When another writer got there first (IsConflict) it reads and
// asks change again, so change may run several times and must have no effect but its result;
// after 32 lost writes it gives up with a protocol.CodeConflict error. Any other error ends it
// at once, change's own unwrapped; wrap the call in WhileNoLeader to ride out an election.
//
// change gets the current entry, nil when the key is absent (never written, deleted or
// expired), and returns ErrKeep to write nothing. UpdateKV returns the revision it wrote, or
// after ErrKeep the revision it read (0: absent).
func UpdateKV(ctx context.Context, kv jetstream.KeyValue, key string, change func(cur jetstream.KeyValueEntry) ([]byte, error)) (uint64, error) {
	wait := kvFirstWait
	for n := 1; ; n++ {
		cur, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			cur = nil
		case err != nil:
			return 0, fmt.Errorf("read %s %s: %w", kv.Bucket(), key, err)
		}
		next, err := change(cur)
		if errors.Is(err, ErrKeep) {
			if cur == nil {
				return 0, nil
			}
			return cur.Revision(), nil
		}
		if err != nil {
			return 0, err
		}
		var rev uint64
		if cur == nil {
			rev, err = kv.Create(ctx, key, next)
		} else {
			rev, err = kv.Update(ctx, key, next, cur.Revision())
		}
		switch {
		case err == nil:
			return rev, nil
		case !IsConflict(err):
			return 0, fmt.Errorf("write %s %s: %w", kv.Bucket(), key, err)
		case n == kvWrites:
			return 0, protocol.Errorf(protocol.CodeConflict, "write %s %s: %d writes lost to other writers in a row; try again", kv.Bucket(), key, n)
		}
		t := time.NewTimer(wait/2 + rand.N(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("write %s %s: %w", kv.Bucket(), key, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, kvLastWait)
	}
}

// IsConflict reports whether a compare-and-set write lost to another writer: the key exists (a
// create) or is at another revision (an update, a publish expecting a last sequence). A
// replicated stream reports it with another error code (10164) than a single replica (10071).
func IsConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
