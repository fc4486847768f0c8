// Package protocol is the single place where skein's wire contract lives: every subject, stream,
// consumer and KV bucket name, and every message type that crosses NATS. Services never spell a
// subject themselves; they ask a Names value, so one namespace change moves a whole mesh.
package protocol

import (
	"strings"
)

// DefaultNamespace is the subject prefix of a mesh when none is configured.
const DefaultNamespace = "skein"

// Base names of the JetStream streams. With the default namespace they are used as they are;
// another namespace prefixes them so several meshes can share one NATS account.
const (
	StreamTasks   = "TASKS"
	StreamWork    = "WORK"
	StreamResults = "RESULTS"
	StreamTrace   = "TRACE"
	StreamUsage   = "USAGE"
	StreamDLQ     = "DLQ"
)

// Base names of the KV buckets and the object store.
const (
	BucketSessions = "sessions"
	BucketAgents   = "agents"
	BucketTools    = "tools"
	BucketMemory   = "memory"
	BucketMined    = "mined"
	// BucketLedger holds what each session tree has spent (LedgerEntry per root and session).
	BucketLedger   = "ledger"
	ObjectPayloads = "payloads"
	// BucketToolCalls keeps each tool call's result under its call id, so a repeated call is
	// answered from the record instead of running the tool again.
	BucketToolCalls = "toolcalls"
	// BucketSteps keeps each finished step's result, so a step redelivered after the RESULTS
	// dedup window republishes its result instead of running again.
	BucketSteps = "steps"
)

// Durable consumer names.
const (
	ConsumerPlanner        = "planner"
	ConsumerPlannerResults = "planner-results"
	// ConsumerPlannerDead reads the dead letters of tasks, steps and results: the planner ends
	// the sessions they belonged to.
	ConsumerPlannerDead    = "planner-dlq"
	ConsumerMiner          = "miner"
	ConsumerMirror         = "trace-mirror"
	consumerExecutorPrefix = "executor-"
)

// Memory operations served by memoryd as micro endpoints on Names.Memory(op).
const (
	MemRetrieve = "retrieve"
	MemIngest   = "ingest"
	MemFeedback = "feedback"
	MemInspect  = "inspect"
	MemList     = "list"
	MemGet      = "get"
	MemImport   = "import"
	MemEvict    = "evict"
	MemRetire   = "retire"
	MemMigrate  = "migrate"
	MemEmbed    = "embed"
	MemHealth   = "health"
	// MemRemember stores notes written inside a session: an agent's own remember calls and a
	// sub-agent's findings shared with its parent.
	MemRemember = "remember"
	// MemRepair brings a store whose search index lives apart from its records (Milvus) back
	// to the records.
	MemRepair = "repair"
)

// Queue groups for micro services, so that more replicas share the load.
const (
	QueueToolhost = "toolhost"
	QueueMemoryd  = "memoryd"
	QueueGateway  = "gateway"
	QueuePlanner  = "planner"
)

// Micro service names as they appear in $SRV discovery.
const (
	ServiceToolhost = "skein-toolhost"
	ServiceMemoryd  = "skein-memoryd"
	ServiceGateway  = "skein-gateway"
)

// Names derives every subject and resource name of one mesh from its namespace.
type Names struct {
	NS string
}

// NewNames returns the names for namespace ns ("" means DefaultNamespace).
func NewNames(ns string) Names {
	if ns == "" {
		ns = DefaultNamespace
	}
	return Names{NS: ns}
}

func (n Names) ns() string {
	if n.NS == "" {
		return DefaultNamespace
	}
	return n.NS
}

func (n Names) subj(parts ...string) string {
	return n.ns() + "." + strings.Join(parts, ".")
}

// Submit is the gateway's request/reply subject for new tasks.
func (n Names) Submit() string { return n.subj("gateway", "submit") }

// Cancel is the gateway's request/reply subject to cancel a session.
func (n Names) Cancel() string { return n.subj("gateway", "cancel") }

// CancelNotice is the broadcast subject on which the gateway announces a cancelled session;
// CancelNoticeAll matches every session (executors, toolhosts and planners subscribe to it).
func (n Names) CancelNotice(session string) string { return n.subj("cancel", session) }
func (n Names) CancelNoticeAll() string            { return n.subj("cancel", ">") }

// Task is the TASKS subject for one agent; TaskAll matches every agent.
func (n Names) Task(agent string) string { return n.subj("task", agent) }
func (n Names) TaskAll() string          { return n.subj("task", ">") }

// Work is the WORK subject for one agent's steps; WorkAll matches every agent.
func (n Names) Work(agent string) string { return n.subj("work", agent) }
func (n Names) WorkAll() string          { return n.subj("work", ">") }

// Result is the RESULTS subject of one session; ResultAll matches every session.
func (n Names) Result(session string) string { return n.subj("result", session) }
func (n Names) ResultAll() string            { return n.subj("result", ">") }

// Delta is the core NATS subject on which a session's model answers stream as they are
// generated (Delta messages, batched, not kept in any stream); DeltaAll matches every session.
// The trace keeps the whole text: a reader that misses deltas loses nothing but the wait.
func (n Names) Delta(session string) string { return n.subj("delta", session) }
func (n Names) DeltaAll() string            { return n.subj("delta", ">") }

// Trace is the TRACE subject of one session; TraceAll matches every session.
func (n Names) Trace(session string) string { return n.subj("trace", session) }
func (n Names) TraceAll() string            { return n.subj("trace", ">") }

// Usage is the subject on which per-session usage totals are published for mesh-wide accounting.
func (n Names) Usage(agent string) string { return n.subj("usage", agent) }
func (n Names) UsageAll() string          { return n.subj("usage", ">") }

// Tool is the micro endpoint subject of one tool (or agent-as-tool).
func (n Names) Tool(name string) string { return n.subj("tool", name) }

// Memory is the micro endpoint subject of one memoryd operation.
func (n Names) Memory(op string) string { return n.subj("memory", op) }

// Storage is the request/reply subject on which the process that runs the mesh's embedded server
// says whether JetStream can write (StorageRequest, StorageReply). A mesh on a NATS server of its
// own has nobody answering it: the server's monitoring (/healthz) says the same there.
func (n Names) Storage() string { return n.subj("mesh", "storage") }

// DLQ is the subject dead letters are republished to.
func (n Names) DLQ(stream string) string { return n.subj("dlq", strings.ToLower(stream)) }
func (n Names) DLQAll() string           { return n.subj("dlq", ">") }

// Stream returns the JetStream stream name for a base name (StreamTasks, ...).
func (n Names) Stream(base string) string {
	if n.ns() == DefaultNamespace {
		return base
	}
	return strings.ToUpper(sanitize(n.ns())) + "_" + base
}

// Bucket returns the KV bucket (or object store) name for a base name (BucketSessions, ...).
func (n Names) Bucket(base string) string {
	if n.ns() == DefaultNamespace {
		return base
	}
	return sanitize(n.ns()) + "_" + base
}

// KVKey is the subject a write of key in bucket (its full name, as Bucket gives it) is
// published on: what a KeyValue's Put and Update send, for a writer that publishes itself.
func KVKey(bucket, key string) string { return "$KV." + bucket + "." + key }

// ExecutorConsumer is the shared durable every executor of one agent pulls from; starting more
// executor processes scales that agent.
func (n Names) ExecutorConsumer(agent string) string { return consumerExecutorPrefix + agent }

// MaxDeliveriesAdvisory is the JetStream advisory subject that feeds the DLQ.
func (n Names) MaxDeliveriesAdvisory() string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"
}

// MsgTerminatedAdvisory is the JetStream advisory subject of messages a consumer terminated.
func (n Names) MsgTerminatedAdvisory() string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>"
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

// TranscriptObject is the name, in the payloads object store, of a session's latest transcript,
// which the next turn of its conversation continues from.
func TranscriptObject(session string) string { return "transcript/" + session }

// StepMsgID is the JetStream Msg-Id of a work item, so a replayed publish is deduplicated.
func StepMsgID(session, step string) string { return session + "/" + step }

// ResultMsgID is the Msg-Id of a step result.
func ResultMsgID(session, step string) string { return session + "/" + step + "/result" }

// AttrMemory, on a step_started event, names the memory the step used when it is not the
// agent's own (memory.namespace); the miner learns into it.
const AttrMemory = "memory"

// AttrPurpose, on a model_call or decision event of the executor, names work done besides the
// step's own turns: PurposeCompaction for the notes compaction extracts from the turns it folds
// (and offers to memory).
const (
	AttrPurpose       = "purpose"
	PurposeCompaction = "compaction"
)
