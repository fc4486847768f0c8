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
	// ToolCallTTL is how long a tool call's result is kept under its call id; it must outlast
	// every redelivery of the step that made the call.
	ToolCallTTL time.Duration
	// StepTTL is how long a finished step's result is kept for redeliveries.
	StepTTL time.Duration
	// RecordMaxBytes bounds each of the tool call and step record buckets.
	RecordMaxBytes int64
}

// DefaultLimits suit one machine; a cluster raises Replicas to 3.
func DefaultLimits() Limits {
	return Limits{
		Replicas:       1,
		TraceMaxAge:    30 * 24 * time.Hour,
		TraceMaxBytes:  1 << 30,
		ResultsMaxAge:  7 * 24 * time.Hour,
		DedupWindow:    10 * time.Minute,
		ToolCallTTL:    24 * time.Hour,
		StepTTL:        7 * 24 * time.Hour,
		RecordMaxBytes: 1 << 30,
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
	for _, b := range []string{protocol.BucketSessions, protocol.BucketAgents, protocol.BucketTools, protocol.BucketMemory, protocol.BucketMined} {
		cfg := jetstream.KeyValueConfig{Bucket: n.Bucket(b), Replicas: r, Storage: jetstream.FileStorage}
		if b == protocol.BucketSessions {
			cfg.History = 1
		}
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("provision KV bucket %s: %w", cfg.Bucket, err)
		}
	}
	for _, rec := range []struct {
		base string
		ttl  time.Duration
	}{{protocol.BucketToolCalls, l.ToolCallTTL}, {protocol.BucketSteps, l.StepTTL}} {
		cfg := jetstream.KeyValueConfig{Bucket: n.Bucket(rec.base), Replicas: r, Storage: jetstream.FileStorage,
			History: 1, TTL: rec.ttl, MaxBytes: l.RecordMaxBytes}
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

// ConsumerSpec is one durable consumer of the mesh: the stream it reads, its settings and how
// many messages a process works on at once. Every role's consumer is declared in Consumers, so
// their settings can be read and changed in one place.
type ConsumerSpec struct {
	Stream string
	Config jetstream.ConsumerConfig
	// Workers is the default size of a process's worker pool for it.
	Workers int
	// Prefetch is how many messages a process pulls ahead of its free workers: a message waiting
	// in a client buffer is not heartbeated, so it stays small.
	Prefetch int
}

// Consumer kinds (the executor's consumer is one per agent).
const (
	KindPlannerTasks   = protocol.ConsumerPlanner
	KindPlannerResults = protocol.ConsumerPlannerResults
	KindMiner          = protocol.ConsumerMiner
	KindExecutor       = "executor"
)

// Consumers returns the settings of one kind of consumer (agent names the executor's). AckWait
// is short so a crashed process's work comes back in seconds; workers heartbeat (InProgress)
// every third of it while they handle a message, so slow work is not redelivered.
func Consumers(n protocol.Names, kind, agent string) (ConsumerSpec, error) {
	const ackWait = 10 * time.Second
	switch kind {
	case KindPlannerTasks:
		return ConsumerSpec{Stream: n.Stream(protocol.StreamTasks), Workers: 8, Prefetch: 1, Config: jetstream.ConsumerConfig{
			Durable: protocol.ConsumerPlanner, FilterSubject: n.TaskAll(), Description: "planner: new sessions",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 10, MaxAckPending: 1000,
		}}, nil
	case KindPlannerResults:
		return ConsumerSpec{Stream: n.Stream(protocol.StreamResults), Workers: 8, Prefetch: 1, Config: jetstream.ConsumerConfig{
			Durable: protocol.ConsumerPlannerResults, FilterSubject: n.ResultAll(), Description: "planner: step results",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 10, MaxAckPending: 1000,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		}}, nil
	case KindMiner:
		// Everything still in the stream is mined once; mining is idempotent, so a first start
		// on an old stream only costs time. Most trace events are acked at once (only a
		// session's usage event is mined), so the miner pulls further ahead than the others.
		return ConsumerSpec{Stream: n.Stream(protocol.StreamTrace), Workers: 4, Prefetch: 16, Config: jetstream.ConsumerConfig{
			Durable: protocol.ConsumerMiner, FilterSubject: n.TraceAll(), Description: "mines finished sessions into guidelines",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5, MaxAckPending: 256,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		}}, nil
	case KindExecutor:
		if err := protocol.CheckToken("agent name", agent); err != nil {
			return ConsumerSpec{}, err
		}
		return ConsumerSpec{Stream: n.Stream(protocol.StreamWork), Workers: 4, Prefetch: 1, Config: jetstream.ConsumerConfig{
			Durable: n.ExecutorConsumer(agent), FilterSubject: n.Work(agent), Description: "executors of agent " + agent,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 5, MaxAckPending: 1000,
		}}, nil
	}
	return ConsumerSpec{}, fmt.Errorf("no consumer of kind %q", kind)
}
