package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Retention limits of the mesh's streams.
type Limits struct {
	Replicas      int
	TraceMaxAge   time.Duration
	TraceMaxBytes int64
	ResultsMaxAge time.Duration
	DedupWindow   time.Duration
}

// DefaultLimits suit one machine; a cluster raises Replicas to 3.
func DefaultLimits() Limits {
	return Limits{
		Replicas:      1,
		TraceMaxAge:   30 * 24 * time.Hour,
		TraceMaxBytes: 1 << 30,
		ResultsMaxAge: 7 * 24 * time.Hour,
		DedupWindow:   10 * time.Minute,
	}
}

// StreamConfigs returns the configuration of every stream of the mesh.
func StreamConfigs(n protocol.Names, l Limits) []jetstream.StreamConfig {
	r := max(l.Replicas, 1)
	return []jetstream.StreamConfig{
		{
			Name: n.Stream(protocol.StreamTasks), Subjects: []string{n.TaskAll()},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
			Duplicates: l.DedupWindow, Replicas: r,
		},
		{
			Name: n.Stream(protocol.StreamWork), Subjects: []string{n.WorkAll()},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
			Duplicates: l.DedupWindow, Replicas: r,
		},
		{
			Name: n.Stream(protocol.StreamResults), Subjects: []string{n.ResultAll()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
			MaxAge: l.ResultsMaxAge, Duplicates: l.DedupWindow, Replicas: r,
		},
		{
			Name: n.Stream(protocol.StreamTrace), Subjects: []string{n.TraceAll()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
			MaxAge: l.TraceMaxAge, MaxBytes: l.TraceMaxBytes, Discard: jetstream.DiscardOld, Replicas: r,
		},
		{
			Name: n.Stream(protocol.StreamUsage), Subjects: []string{n.UsageAll()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
			MaxAge: l.TraceMaxAge, Replicas: r,
		},
		{
			Name: n.Stream(protocol.StreamDLQ), Subjects: []string{n.DLQAll()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
			MaxAge: l.TraceMaxAge, Replicas: r,
		},
	}
}

// Provision creates or updates every stream, KV bucket and object store of the mesh. It is
// idempotent: every service calls it at start, so any of them can be the first one up.
func Provision(ctx context.Context, js jetstream.JetStream, n protocol.Names, l Limits) error {
	for _, sc := range StreamConfigs(n, l) {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
	}
	r := max(l.Replicas, 1)
	for _, b := range []string{protocol.BucketSessions, protocol.BucketAgents, protocol.BucketTools, protocol.BucketMemory, protocol.BucketMined, protocol.BucketLedger} {
		cfg := jetstream.KeyValueConfig{Bucket: n.Bucket(b), Replicas: r, Storage: jetstream.FileStorage}
		if b == protocol.BucketSessions {
			cfg.History = 1
		}
		if b == protocol.BucketLedger {
			// A tree's spending matters while it runs; keep it as long as its results.
			cfg.History, cfg.TTL = 1, l.ResultsMaxAge
		}
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("provision KV bucket %s: %w", cfg.Bucket, err)
		}
	}
	osc := jetstream.ObjectStoreConfig{Bucket: n.Bucket(protocol.ObjectPayloads), Replicas: r, Storage: jetstream.FileStorage}
	if _, err := js.CreateOrUpdateObjectStore(ctx, osc); err != nil {
		return fmt.Errorf("provision object store %s: %w", osc.Bucket, err)
	}
	return nil
}

// KV opens one of the mesh's buckets (it must have been provisioned).
func KV(ctx context.Context, js jetstream.JetStream, n protocol.Names, base string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, n.Bucket(base))
	if err != nil {
		return nil, fmt.Errorf("open KV bucket %s: %w", n.Bucket(base), err)
	}
	return kv, nil
}

// IsNotFound reports whether err means a missing key, stream or consumer.
func IsNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrMsgNotFound)
}
