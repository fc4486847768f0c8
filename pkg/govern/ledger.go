package govern

import (
	"context"
	"fmt"
	"slices"
	"time"

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
	entry, err := l.kv.Get(ctx, key)
	if err != nil {
		if bus.IsNotFound(err) {
			return protocol.LedgerEntry{}, nil
		}
		return protocol.LedgerEntry{}, fmt.Errorf("read ledger %s: %w", key, err)
	}
	return decode(key, entry)
}

func decode(key string, entry jetstream.KeyValueEntry) (protocol.LedgerEntry, error) {
	var e protocol.LedgerEntry
	if entry == nil {
		return e, nil
	}
	if err := protocol.Unmarshal(entry.Value(), &e); err != nil {
		return e, fmt.Errorf("ledger %s: %w", key, err)
	}
	return e, nil
}

// Charge adds delta to each key (a session and its root) with compare-and-set (bus.UpdateKV),
// riding out a leader election for up to bus.LeaderWait: a charge that is not written is
// spending no budget check will see.
func (l *Ledger) Charge(ctx context.Context, delta protocol.LedgerEntry, keys ...string) error {
	for _, key := range dedupe(keys) {
		if err := l.charge(ctx, delta, key); err != nil {
			return fmt.Errorf("charge ledger %s: %w", key, err)
		}
	}
	return nil
}

func (l *Ledger) charge(ctx context.Context, delta protocol.LedgerEntry, key string) error {
	ctx, cancel := context.WithTimeout(ctx, bus.LeaderWait)
	defer cancel()
	return bus.WhileNoLeader(ctx, func() error {
		_, err := bus.UpdateKV(ctx, l.kv, key, func(cur jetstream.KeyValueEntry) ([]byte, error) {
			e, err := decode(key, cur)
			if err != nil {
				return nil, err
			}
			next := add(e, delta)
			return protocol.Marshal(&next)
		})
		return err
	})
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
