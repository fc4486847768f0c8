package govern

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Ledger is the ledger KV: what each session, and each session tree under its root's id, has
// spent. Writers on any executor update it with compare-and-set, so concurrent charges add up.
type Ledger struct {
	kv jetstream.KeyValue
}

// OpenLedger opens the provisioned ledger bucket.
func OpenLedger(ctx context.Context, js jetstream.JetStream, names protocol.Names) (*Ledger, error) {
	kv, err := bus.KV(ctx, js, names, protocol.BucketLedger)
	if err != nil {
		return nil, err
	}
	return &Ledger{kv: kv}, nil
}

// Get returns what key has spent (zero when nothing yet).
func (l *Ledger) Get(ctx context.Context, key string) (protocol.LedgerEntry, error) {
	e, _, err := l.get(ctx, key)
	return e, err
}

func (l *Ledger) get(ctx context.Context, key string) (protocol.LedgerEntry, uint64, error) {
	var e protocol.LedgerEntry
	entry, err := l.kv.Get(ctx, key)
	if err != nil {
		if bus.IsNotFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return e, 0, nil
		}
		return e, 0, fmt.Errorf("read ledger %s: %w", key, err)
	}
	if err := protocol.Unmarshal(entry.Value(), &e); err != nil {
		return e, 0, fmt.Errorf("ledger %s: %w", key, err)
	}
	return e, entry.Revision(), nil
}

// Charge adds delta to each key (a session and its root) under compare-and-set, retrying when
// another writer got there first.
func (l *Ledger) Charge(ctx context.Context, delta protocol.LedgerEntry, keys ...string) error {
	for _, key := range dedupe(keys) {
		b := backoff.WithContext(backoff.WithMaxRetries(backoff.NewConstantBackOff(5*time.Millisecond), 200), ctx)
		err := backoff.Retry(func() error {
			cur, rev, err := l.get(ctx, key)
			if err != nil {
				return err
			}
			next := add(cur, delta)
			data, err := protocol.Marshal(&next)
			if err != nil {
				return backoff.Permanent(err)
			}
			if rev == 0 {
				_, err = l.kv.Create(ctx, key, data)
			} else {
				_, err = l.kv.Update(ctx, key, data, rev)
			}
			return err
		}, b)
		if err != nil {
			return fmt.Errorf("charge ledger %s: %w", key, err)
		}
	}
	return nil
}

func add(a, d protocol.LedgerEntry) protocol.LedgerEntry {
	a.InputTokens += d.InputTokens
	a.OutputTokens += d.OutputTokens
	a.CostUSD += d.CostUSD
	a.Turns += d.Turns
	a.ToolCalls += d.ToolCalls
	a.Children += d.Children
	for _, m := range d.UnpricedModels {
		if !slices.Contains(a.UnpricedModels, m) {
			a.UnpricedModels = append(a.UnpricedModels, m)
		}
	}
	if a.Exceeded == nil && d.Exceeded != nil {
		a.Exceeded = d.Exceeded // the first limit reached stays the tree's reason
	}
	a.Updated = time.Now().UTC()
	return a
}

func dedupe(keys []string) []string {
	var out []string
	for _, k := range keys {
		if k != "" && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}
