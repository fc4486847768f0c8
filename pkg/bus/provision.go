package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// StreamLimit bounds one stream.
type StreamLimit struct {
	MaxAge   time.Duration
	MaxBytes int64
	MaxMsgs  int64
}

// Limits are what the mesh may keep: every stream and bucket is bounded. They come from the
// mesh.limits section of the config (service.Limits); DefaultLimits are the defaults.
type Limits struct {
	Replicas int
	// Streams bounds each stream, by base name (protocol.StreamTasks, ...).
	Streams     map[string]StreamLimit
	DedupWindow time.Duration
	// BucketMaxBytes bounds each KV bucket and the object store.
	BucketMaxBytes int64
	// SessionTTL is how long a session's record is kept after its last change.
	SessionTTL time.Duration
	// ToolCallTTL is how long a tool call's result is kept under its call id; it must outlast
	// every redelivery of the step that made the call.
	ToolCallTTL time.Duration
	// StepTTL is how long a finished step's result is kept for redeliveries.
	StepTTL time.Duration
}

// DefaultLimits suit one machine; a cluster raises Replicas to 3.
func DefaultLimits() Limits {
	const day = 24 * time.Hour
	return Limits{
		Replicas: 1,
		Streams: map[string]StreamLimit{
			protocol.StreamTasks:   {MaxAge: 7 * day, MaxBytes: 1 << 30, MaxMsgs: 1_000_000},
			protocol.StreamWork:    {MaxAge: 7 * day, MaxBytes: 1 << 30, MaxMsgs: 1_000_000},
			protocol.StreamResults: {MaxAge: 7 * day, MaxBytes: 1 << 30, MaxMsgs: 1_000_000},
			protocol.StreamTrace:   {MaxAge: 30 * day, MaxBytes: 1 << 30, MaxMsgs: 10_000_000},
			protocol.StreamUsage:   {MaxAge: 30 * day, MaxBytes: 256 << 20, MaxMsgs: 1_000_000},
			protocol.StreamDLQ:     {MaxAge: 30 * day, MaxBytes: 256 << 20, MaxMsgs: 100_000},
		},
		DedupWindow:    10 * time.Minute,
		BucketMaxBytes: 1 << 30,
		SessionTTL:     30 * day,
		ToolCallTTL:    day,
		StepTTL:        7 * day,
	}
}

func (l Limits) stream(base string) StreamLimit {
	s, ok := l.Streams[base]
	if !ok {
		s = DefaultLimits().Streams[base]
	}
	return s
}

// StreamConfigs returns the configuration of every stream of the mesh.
func StreamConfigs(n protocol.Names, l Limits) []jetstream.StreamConfig {
	r := max(l.Replicas, 1)
	sc := func(base string, subject string, ret jetstream.RetentionPolicy, discard jetstream.DiscardPolicy, dedup time.Duration) jetstream.StreamConfig {
		lim := l.stream(base)
		return jetstream.StreamConfig{Name: n.Stream(base), Subjects: []string{subject}, Retention: ret, Storage: jetstream.FileStorage,
			MaxAge: lim.MaxAge, MaxBytes: orUnlimited(lim.MaxBytes), MaxMsgs: orUnlimited(lim.MaxMsgs), Discard: discard,
			Duplicates: dedup, Replicas: r}
	}
	// Work queues refuse new messages when full (the publisher sees the error) instead of
	// dropping accepted work; logs drop their oldest entries.
	trace := sc(protocol.StreamTrace, n.TraceAll(), jetstream.LimitsPolicy, jetstream.DiscardOld, 2*time.Minute)
	// Sessions' traces are read with direct gets (bus.ReadStream), which need no consumer.
	trace.AllowDirect = true
	return []jetstream.StreamConfig{
		sc(protocol.StreamTasks, n.TaskAll(), jetstream.WorkQueuePolicy, jetstream.DiscardNew, l.DedupWindow),
		sc(protocol.StreamWork, n.WorkAll(), jetstream.WorkQueuePolicy, jetstream.DiscardNew, l.DedupWindow),
		sc(protocol.StreamResults, n.ResultAll(), jetstream.LimitsPolicy, jetstream.DiscardOld, l.DedupWindow),
		// Trace events carry a Msg-Id so a resent event (its ack lost) is stored once; the
		// window covers a publisher's resends (trace.Publisher), no longer.
		trace,
		sc(protocol.StreamUsage, n.UsageAll(), jetstream.LimitsPolicy, jetstream.DiscardOld, l.DedupWindow),
		sc(protocol.StreamDLQ, n.DLQAll(), jetstream.LimitsPolicy, jetstream.DiscardOld, l.DedupWindow),
	}
}

func orUnlimited(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

// BucketConfigs returns the configuration of every KV bucket of the mesh.
func BucketConfigs(n protocol.Names, l Limits) []jetstream.KeyValueConfig {
	r := max(l.Replicas, 1)
	kv := func(base string, history uint8, ttl time.Duration) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: n.Bucket(base), Replicas: r, Storage: jetstream.FileStorage,
			History: history, TTL: ttl, MaxBytes: orUnlimited(l.BucketMaxBytes)}
	}
	// Memory entries, agents and tools live until replaced; their buckets are bounded by size.
	// The miner's compression cache has a key per mined session: it is kept as long as traces
	// are (a session whose trace is gone cannot be mined again), not until the bucket is full,
	// since the server holds every key in memory.
	return []jetstream.KeyValueConfig{
		kv(protocol.BucketSessions, 1, l.SessionTTL),
		kv(protocol.BucketAgents, 1, 0),
		kv(protocol.BucketTools, 1, 0),
		kv(protocol.BucketMemory, 1, 0),
		kv(protocol.BucketMined, 1, l.stream(protocol.StreamTrace).MaxAge),
		kv(protocol.BucketToolCalls, 1, l.ToolCallTTL),
		kv(protocol.BucketSteps, 1, l.StepTTL),
		// A tree's spending matters while it runs; keep it as long as its results.
		kv(protocol.BucketLedger, 1, l.stream(protocol.StreamResults).MaxAge),
	}
}

// ObjectStoreConfigs returns the configuration of every object store of the mesh. Stored tool
// results and transcripts are referenced from traces, so objects live as long as trace events:
// the store's TTL is the TRACE stream's max_age (its size is bounded like a bucket's).
func ObjectStoreConfigs(n protocol.Names, l Limits) []jetstream.ObjectStoreConfig {
	return []jetstream.ObjectStoreConfig{{Bucket: n.Bucket(protocol.ObjectPayloads), Replicas: max(l.Replicas, 1),
		Storage: jetstream.FileStorage, MaxBytes: orUnlimited(l.BucketMaxBytes), TTL: l.stream(protocol.StreamTrace).MaxAge}}
}

// Diff is one setting of an existing stream, bucket or object store that differs from the config.
type Diff struct {
	Resource string // "stream TASKS", "bucket sessions", "object store payloads"
	Field    string
	Have     string
	Want     string
}

func (d Diff) String() string {
	return fmt.Sprintf("%s: %s is %s on the server, %s in the config", d.Resource, d.Field, d.Have, d.Want)
}

// ProvisionOptions say what Provision may do to what exists.
type ProvisionOptions struct {
	// Apply changes existing streams and buckets to the config. Without it they are left as the
	// operator set them, and each difference is logged.
	Apply bool
	// Logger receives the differences (nil: slog.Default()).
	Logger *slog.Logger
}

// Provision creates every stream, KV bucket and object store of the mesh that is missing. It
// never changes one that exists: each setting that differs from the config is logged, and
// changed only by `skein mesh apply` (ProvisionWith with Apply). Every service calls it at
// start, so any of them can be the first one up.
func Provision(ctx context.Context, js jetstream.JetStream, n protocol.Names, l Limits) error {
	_, err := ProvisionWith(ctx, js, n, l, ProvisionOptions{})
	return err
}

// ProvisionWith creates what is missing and returns the differences of what exists; with
// opts.Apply it also changes those to the config.
func ProvisionWith(ctx context.Context, js jetstream.JetStream, n protocol.Names, l Limits, opts ProvisionOptions) ([]Diff, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var resources []resource
	for _, want := range StreamConfigs(n, l) {
		resources = append(resources, resource{kind: "stream", name: want.Name,
			notFound: jetstream.ErrStreamNotFound, exists: jetstream.ErrStreamNameAlreadyInUse,
			open: func() (jetstream.StreamConfig, error) {
				s, err := js.Stream(ctx, want.Name)
				if err != nil {
					return jetstream.StreamConfig{}, err
				}
				return s.CachedInfo().Config, nil
			},
			create: func() error { _, err := js.CreateStream(ctx, want); return err },
			diffs:  func(have jetstream.StreamConfig) []Diff { return streamDiffs("stream "+want.Name, have, want) },
			update: func(have jetstream.StreamConfig) error {
				// Only what the config owns changes; the rest of the operator's settings stay.
				merged := have
				merged.Subjects, merged.MaxAge, merged.MaxBytes, merged.MaxMsgs = want.Subjects, want.MaxAge, want.MaxBytes, want.MaxMsgs
				merged.Discard, merged.Duplicates, merged.Replicas = want.Discard, want.Duplicates, want.Replicas
				_, err := js.UpdateStream(ctx, merged)
				return err
			}})
	}
	for _, want := range BucketConfigs(n, l) {
		resources = append(resources, resource{kind: "bucket", name: want.Bucket,
			notFound: jetstream.ErrBucketNotFound, exists: jetstream.ErrBucketExists,
			open: func() (jetstream.StreamConfig, error) {
				kv, err := js.KeyValue(ctx, want.Bucket)
				if err != nil {
					return jetstream.StreamConfig{}, err
				}
				return streamConfigOf(kv.Status(ctx))
			},
			create: func() error { _, err := js.CreateKeyValue(ctx, want); return err },
			diffs:  func(have jetstream.StreamConfig) []Diff { return bucketDiffs("bucket "+want.Bucket, have, want) },
			update: func(jetstream.StreamConfig) error { _, err := js.UpdateKeyValue(ctx, want); return err }})
	}
	for _, want := range ObjectStoreConfigs(n, l) {
		resources = append(resources, resource{kind: "object store", name: want.Bucket,
			notFound: jetstream.ErrBucketNotFound, exists: jetstream.ErrBucketExists,
			open: func() (jetstream.StreamConfig, error) {
				obs, err := js.ObjectStore(ctx, want.Bucket)
				if err != nil {
					return jetstream.StreamConfig{}, err
				}
				return streamConfigOf(obs.Status(ctx))
			},
			create: func() error { _, err := js.CreateObjectStore(ctx, want); return err },
			diffs: func(have jetstream.StreamConfig) []Diff {
				return objectStoreDiffs("object store "+want.Bucket, have, want)
			},
			update: func(jetstream.StreamConfig) error { _, err := js.UpdateObjectStore(ctx, want); return err }})
	}
	var diffs []Diff
	for _, r := range resources {
		d, err := r.reconcile(log, opts.Apply)
		diffs = append(diffs, d...)
		if err != nil {
			return diffs, err
		}
	}
	return diffs, nil
}

// streamConfigOf is the stream config behind a KV bucket's or an object store's status.
func streamConfigOf[S any](st S, err error) (jetstream.StreamConfig, error) {
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	si, ok := any(st).(interface{ StreamInfo() *jetstream.StreamInfo })
	if !ok {
		return jetstream.StreamConfig{}, fmt.Errorf("status %T carries no stream info", st)
	}
	return si.StreamInfo().Config, nil
}

// resource is one stream, KV bucket or object store as ProvisionWith reconciles it.
type resource struct {
	kind, name       string
	notFound, exists error // what opening a missing one, and creating one made meanwhile, return
	open             func() (jetstream.StreamConfig, error)
	create           func() error
	diffs            func(have jetstream.StreamConfig) []Diff
	update           func(have jetstream.StreamConfig) error
}

// reconcile creates the resource when it is missing; otherwise it returns how it differs from
// the config, logged, and changes it only with apply.
func (r resource) reconcile(log *slog.Logger, apply bool) ([]Diff, error) {
	have, err := r.open()
	if errors.Is(err, r.notFound) {
		if err := r.create(); err != nil && !errors.Is(err, r.exists) {
			return nil, fmt.Errorf("provision %s %s: %w", r.kind, r.name, err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("provision %s %s: %w", r.kind, r.name, err)
	}
	d := r.diffs(have)
	if len(d) == 0 {
		return nil, nil
	}
	if !apply {
		for _, x := range d {
			log.Warn(r.kind+" differs from the config; left as it is (run `skein mesh apply` to change it)", "diff", x.String())
		}
		return d, nil
	}
	if err := r.update(have); err != nil {
		return d, fmt.Errorf("apply %s %s: %w", r.kind, r.name, err)
	}
	log.Info(r.kind+" changed to the config", strings.ReplaceAll(r.kind, " ", "_"), r.name, "changes", len(d))
	return d, nil
}

func streamDiffs(res string, have, want jetstream.StreamConfig) []Diff {
	var d []Diff
	add := func(field string, h, w any) {
		if fmt.Sprint(h) != fmt.Sprint(w) {
			d = append(d, Diff{Resource: res, Field: field, Have: fmt.Sprint(h), Want: fmt.Sprint(w)})
		}
	}
	add("subjects", have.Subjects, want.Subjects)
	add("max_age", have.MaxAge, want.MaxAge)
	add("max_bytes", have.MaxBytes, want.MaxBytes)
	add("max_msgs", have.MaxMsgs, want.MaxMsgs)
	add("discard", have.Discard, want.Discard)
	add("duplicate_window", have.Duplicates, want.Duplicates)
	add("replicas", have.Replicas, want.Replicas)
	return d
}

func bucketDiffs(res string, have jetstream.StreamConfig, want jetstream.KeyValueConfig) []Diff {
	var d []Diff
	add := func(field string, h, w any) {
		if fmt.Sprint(h) != fmt.Sprint(w) {
			d = append(d, Diff{Resource: res, Field: field, Have: fmt.Sprint(h), Want: fmt.Sprint(w)})
		}
	}
	add("ttl", have.MaxAge, want.TTL)
	add("max_bytes", have.MaxBytes, want.MaxBytes)
	add("history", have.MaxMsgsPerSubject, int64(max(want.History, 1)))
	add("replicas", have.Replicas, want.Replicas)
	return d
}

func objectStoreDiffs(res string, have jetstream.StreamConfig, want jetstream.ObjectStoreConfig) []Diff {
	var d []Diff
	add := func(field string, h, w any) {
		if fmt.Sprint(h) != fmt.Sprint(w) {
			d = append(d, Diff{Resource: res, Field: field, Have: fmt.Sprint(h), Want: fmt.Sprint(w)})
		}
	}
	add("ttl", have.MaxAge, want.TTL)
	add("max_bytes", have.MaxBytes, want.MaxBytes)
	add("replicas", have.Replicas, want.Replicas)
	return d
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
	// Workers is the default size of a process's worker pool for it. A process pulls only as
	// many messages as it has free workers, so every message it holds is heartbeated.
	Workers int
	// MaxDeliveries is how many deliveries a message that keeps failing gets before its worker
	// moves it to the DLQ. The worker counts them, not the server (Config.MaxDeliver is
	// unlimited): a server that stops delivering a message once its count is reached would
	// drop it if its last delivery could not be dead-lettered (a full disk, a process killed
	// meanwhile); the worker instead dead-letters it on its next delivery.
	MaxDeliveries int
}

// unlimited is a consumer's MaxDeliver: the server never gives up on a message (see
// ConsumerSpec.MaxDeliveries).
const unlimited = -1

// Consumer kinds (the executor's consumer is one per agent).
const (
	KindPlannerTasks   = protocol.ConsumerPlanner
	KindPlannerResults = protocol.ConsumerPlannerResults
	KindPlannerDead    = protocol.ConsumerPlannerDead
	KindMiner          = protocol.ConsumerMiner
	KindMirror         = protocol.ConsumerMirror
	KindExecutor       = "executor"
)

// DefaultAckWait is a consumer's AckWait when mesh.ack_wait is unset. A process killed while it
// handles a message has it delivered again within AckWait of its last heartbeat (every third of
// it), so within 3 s of the kill; a heartbeat may be 2 s late (a loaded machine, a reconnect)
// before a live process's message is delivered a second time.
const DefaultAckWait = 3 * time.Second

// Consumers returns the settings of one kind of consumer (agent names the executor's). ackWait
// is mesh.ack_wait (0: DefaultAckWait); it is short so a crashed process's work comes back in
// seconds, and workers heartbeat (InProgress) every third of it while they handle a message, so
// slow work is not redelivered.
func Consumers(n protocol.Names, kind, agent string, ackWait time.Duration) (ConsumerSpec, error) {
	if ackWait <= 0 {
		ackWait = DefaultAckWait
	}
	switch kind {
	case KindPlannerTasks:
		return ConsumerSpec{Stream: n.Stream(protocol.StreamTasks), Workers: 8, MaxDeliveries: 10, Config: jetstream.ConsumerConfig{
			Durable: protocol.ConsumerPlanner, FilterSubject: n.TaskAll(), Description: "planner: new sessions",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: unlimited, MaxAckPending: 1000,
		}}, nil
	case KindPlannerResults:
		return ConsumerSpec{Stream: n.Stream(protocol.StreamResults), Workers: 8, MaxDeliveries: 10, Config: jetstream.ConsumerConfig{
			Durable: protocol.ConsumerPlannerResults, FilterSubject: n.ResultAll(), Description: "planner: step results",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: unlimited, MaxAckPending: 1000,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		}}, nil
	case KindPlannerDead:
		// Every dead letter of a task, a step or a result, old ones included: a session whose
		// message is in the DLQ moves no more unless the planner ends it (planner/dead.go).
		// The worker's own dead letters for this consumer go to the DLQ's subject, not read here.
		return ConsumerSpec{Stream: n.Stream(protocol.StreamDLQ), Workers: 2, MaxDeliveries: 10, Config: jetstream.ConsumerConfig{
			Durable: protocol.ConsumerPlannerDead, Description: "planner: sessions whose work was dead-lettered",
			FilterSubjects: []string{n.DLQ(n.Stream(protocol.StreamTasks)), n.DLQ(n.Stream(protocol.StreamWork)), n.DLQ(n.Stream(protocol.StreamResults))},
			AckPolicy:      jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: unlimited, MaxAckPending: 64,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		}}, nil
	case KindMiner:
		// Everything still in the stream is mined once; mining is idempotent, so a first start
		// on an old stream only costs time. Most trace events are acked at once (only a
		// session's usage event is mined), so they never keep a worker long.
		return ConsumerSpec{Stream: n.Stream(protocol.StreamTrace), Workers: 4, MaxDeliveries: 5, Config: jetstream.ConsumerConfig{
			Durable: protocol.ConsumerMiner, FilterSubject: n.TraceAll(), Description: "mines finished sessions into guidelines",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: unlimited, MaxAckPending: 256,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		}}, nil
	case KindMirror:
		// The gateway's copy of the trace into local files: one event at a time keeps each file
		// in stream order; only events from its first start on (older ones are in the stream).
		// A write that keeps failing ends in the DLQ, not in a loop; while the mesh's store is
		// full (under skein up, the same disk) the worker holds it instead.
		return ConsumerSpec{Stream: n.Stream(protocol.StreamTrace), Workers: 1, MaxDeliveries: 10, Config: jetstream.ConsumerConfig{
			Durable: protocol.ConsumerMirror, FilterSubject: n.TraceAll(), Description: "gateway: trace files under the mesh home",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: unlimited, MaxAckPending: 1,
			DeliverPolicy: jetstream.DeliverNewPolicy,
		}}, nil
	case KindExecutor:
		if err := protocol.IDAgent.Check(agent); err != nil {
			return ConsumerSpec{}, err
		}
		return ConsumerSpec{Stream: n.Stream(protocol.StreamWork), Workers: 4, MaxDeliveries: 5, Config: jetstream.ConsumerConfig{
			Durable: n.ExecutorConsumer(agent), FilterSubject: n.Work(agent), Description: "executors of agent " + agent,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: unlimited, MaxAckPending: 1000,
		}}, nil
	}
	return ConsumerSpec{}, fmt.Errorf("no consumer of kind %q", kind)
}
