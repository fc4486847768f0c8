// Package auth is who may do what on the mesh: the identities (one per role, the CLI/clients and
// an admin), the permission matrix that says which identity may publish, subscribe, serve or read
// which subject, stream and bucket, its rendering into a nats-server configuration (for
// deploy/nats; the embedded server renders it itself, in pkg/bus/embedded, so that only the binary
// that embeds nats-server links it), and the credential files that carry the identities.
//
// The server enforces the matrix; the code of a role is not trusted to keep to it.
package auth

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Identity is who a connection is: one per role, plus the CLI/clients and the admin.
type Identity string

const (
	Planner  Identity = protocol.RolePlanner
	Executor Identity = protocol.RoleExecutor
	Toolhost Identity = "toolhost"
	Memoryd  Identity = "memoryd"
	Miner    Identity = protocol.RoleMiner
	Gateway  Identity = "gateway"
	// Client is what the CLI and programs that submit work use: submit, cancel, read.
	Client Identity = "client"
	// Admin may do anything, including what no role may: delete streams, import or evict memory.
	Admin Identity = "admin"
)

// Identities lists every identity, in the order files and docs show them.
var Identities = []Identity{Planner, Executor, Toolhost, Memoryd, Miner, Gateway, Client, Admin}

// Valid reports whether id is one of Identities.
func (id Identity) Valid() bool { return slices.Contains(Identities, id) }

// Access is what an identity may do with one resource of the matrix.
type Access uint16

const (
	// Publish: put messages into a stream (its subjects), or onto a plain subject that nobody
	// answers and no stream keeps (a broadcast).
	Publish Access = 1 << iota
	// Get: read single messages of a stream by sequence (no consumers).
	Get
	// Read: Get, plus ephemeral and ordered consumers of a stream, watches and key lists of a
	// bucket, chunk reads of an object store. Never another identity's durable consumer.
	Read
	// Write: put, update and delete keys of a bucket or objects of an object store.
	Write
	// Create: create the stream or bucket when it is missing (provisioning); never change or
	// delete an existing one.
	Create
	// Serve: answer requests on a subject (queue subscribe, one reply per request).
	Serve
	// Call: send requests to a subject.
	Call
	// Subscribe: plain subscription (advisories).
	Subscribe
	// RW is Read|Write.
	RW = Read | Write
)

var accessNames = []struct {
	a    Access
	name string
}{{Publish, "publish"}, {Get, "get"}, {Read, "read"}, {Write, "write"}, {Create, "create"}, {Serve, "serve"}, {Call, "call"}, {Subscribe, "subscribe"}}

func (a Access) String() string {
	var parts []string
	for _, n := range accessNames {
		if a&n.a != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, "+")
}

// Kind is what a matrix row is about.
type Kind int

const (
	KindSubject Kind = iota
	KindStream
	KindBucket
	KindObjectStore
)

// Row is one resource and who may do what with it. Admin is never listed: it may do anything.
type Row struct {
	Kind Kind
	// Base is the stream or bucket base name (protocol.StreamTasks, protocol.BucketSessions...),
	// or for subjects a label.
	Base string
	// Subject returns the subject of a KindSubject row, or the subject filter of a stream.
	Subject func(protocol.Names) string
	Grants  map[Identity]Access
	// Doc says in a few words what the resource is, for docs/security.md.
	Doc string
}

// Durable is a durable consumer and the one identity that may pull from it and ack it.
type Durable struct {
	Stream string // base name
	// Name is the consumer name; "*" means any consumer of the stream (executors have one per agent).
	Name  string
	Owner Identity
}

// Matrix is the permission table of the mesh. To give a new subject, stream or bucket to the
// roles that use it, add a row (and, for a durable consumer, an entry to Durables); a stream or
// bucket row must be one bus.Provision creates (roles wait for it at start), and the gateway
// needs Create on it. Then render deploy/nats/auth.conf and the table in docs/security.md again
// (the tests say how).
var Matrix = []Row{
	// Request/reply services.
	{Kind: KindSubject, Base: "submit", Subject: protocol.Names.Submit, Doc: "submit a task",
		Grants: map[Identity]Access{Gateway: Serve, Client: Call, Toolhost: Call}},
	{Kind: KindSubject, Base: "cancel", Subject: protocol.Names.Cancel, Doc: "cancel a session",
		Grants: map[Identity]Access{Gateway: Serve, Client: Call}},
	{Kind: KindSubject, Base: "cancel-notices", Subject: protocol.Names.CancelNoticeAll, Doc: "cancel notices, one per cancelled session (stop its model calls and tools)",
		Grants: map[Identity]Access{Gateway: Call, Planner: Subscribe, Executor: Subscribe, Toolhost: Subscribe}},
	{Kind: KindSubject, Base: "delta", Subject: protocol.Names.DeltaAll, Doc: "model answers as they are generated (not kept)",
		Grants: map[Identity]Access{Executor: Publish, Gateway: Subscribe, Client: Subscribe}},
	{Kind: KindSubject, Base: "tool.*", Subject: func(n protocol.Names) string { return n.Tool("*") }, Doc: "call a tool (or an agent as a tool)",
		Grants: map[Identity]Access{Toolhost: Serve, Executor: Call}},
	memRow(protocol.MemRetrieve, "guidelines for a step", Executor, Client),
	memRow(protocol.MemIngest, "add mined guidelines", Miner),
	memRow(protocol.MemFeedback, "helpful/harmful counts", Miner),
	memRow(protocol.MemRemember, "notes written in a session: remember, and sub-agent findings shared with the parent", Executor, Toolhost),
	memRow(protocol.MemHealth, "memoryd health", Planner, Executor, Toolhost, Miner, Gateway, Client),
	memRow(protocol.MemEmbed, "embed texts", Executor, Toolhost, Client),
	memRow(protocol.MemInspect, "read memory", Client, Gateway),
	memRow(protocol.MemList, "read memory", Client, Gateway),
	memRow(protocol.MemGet, "read memory", Client, Gateway),
	memRow(protocol.MemImport, "import memory (admin only)"),
	memRow(protocol.MemEvict, "evict memory (admin only)"),
	memRow(protocol.MemMigrate, "re-embed memory (admin only)"),
	memRow(protocol.MemRepair, "bring Milvus back to the memory's records (admin only)"),
	// The HTTP API (and so the console) retires or evicts single entries behind its bearer token.
	memRow(protocol.MemRetire, "retire or evict one entry", Gateway),
	// The process that runs the embedded server (as admin) says whether JetStream can write.
	{Kind: KindSubject, Base: "storage", Subject: protocol.Names.Storage, Doc: "whether the mesh's store can write (embedded server)",
		Grants: map[Identity]Access{Planner: Call, Executor: Call, Toolhost: Call, Memoryd: Call, Miner: Call, Gateway: Call, Client: Call}},
	{Kind: KindSubject, Base: "dlq-advisories", Subject: protocol.Names.MaxDeliveriesAdvisory, Doc: "JetStream max-deliveries advisories (feed the DLQ)",
		Grants: map[Identity]Access{Gateway: Subscribe}},
	{Kind: KindSubject, Base: "term-advisories", Subject: protocol.Names.MsgTerminatedAdvisory, Doc: "JetStream terminated-message advisories (feed the DLQ)",
		Grants: map[Identity]Access{Gateway: Subscribe}},

	// Streams.
	{Kind: KindStream, Base: protocol.StreamTasks, Subject: protocol.Names.TaskAll, Doc: "accepted tasks (work queue)",
		Grants: map[Identity]Access{Gateway: Publish | Get | Create}},
	{Kind: KindStream, Base: protocol.StreamWork, Subject: protocol.Names.WorkAll, Doc: "steps for executors (work queue)",
		Grants: map[Identity]Access{Planner: Publish, Gateway: Get | Create}},
	{Kind: KindStream, Base: protocol.StreamResults, Subject: protocol.Names.ResultAll, Doc: "step results",
		Grants: map[Identity]Access{Executor: Publish, Gateway: Get | Create}},
	{Kind: KindStream, Base: protocol.StreamTrace, Subject: protocol.Names.TraceAll, Doc: "every session's events",
		Grants: map[Identity]Access{Gateway: Publish | Read | Create, Planner: Publish | Read, Executor: Publish, Miner: Publish | Read,
			Toolhost: Publish | Read, Client: Read}},
	{Kind: KindStream, Base: protocol.StreamUsage, Subject: protocol.Names.UsageAll, Doc: "per-session usage totals",
		Grants: map[Identity]Access{Planner: Publish, Miner: Publish, Client: Read, Gateway: Read | Create}},
	{Kind: KindStream, Base: protocol.StreamDLQ, Subject: protocol.Names.DLQAll, Doc: "dead letters",
		// Every consuming role dead-letters what it cannot decode before terminating it.
		Grants: map[Identity]Access{Gateway: Publish | Read | Create, Planner: Publish, Executor: Publish, Miner: Publish, Client: Read}},

	// KV buckets and the object store.
	{Kind: KindBucket, Base: protocol.BucketSessions, Doc: "session records",
		Grants: map[Identity]Access{Gateway: RW | Create, Planner: RW, Executor: Read, Client: Read}},
	{Kind: KindBucket, Base: protocol.BucketAgents, Doc: "agent registrations",
		// The planner reads registrations to end sessions whose agent lost every executor; the
		// toolhost reads an agent's declaration (description, input schema) to offer it as a tool.
		Grants: map[Identity]Access{Executor: RW, Gateway: Read | Create, Planner: Read, Client: Read, Toolhost: Read}},
	{Kind: KindBucket, Base: protocol.BucketTools, Doc: "tool catalogue",
		// memoryd's lesson gate reads the tool names to tell a lesson that names a tool its
		// session never used.
		Grants: map[Identity]Access{Toolhost: RW, Executor: Read, Gateway: Create, Client: Read, Memoryd: Read}},
	{Kind: KindBucket, Base: protocol.BucketMemory, Doc: "strategic and tactical memory (only memoryd)",
		Grants: map[Identity]Access{Memoryd: RW, Gateway: Create}},
	{Kind: KindBucket, Base: protocol.BucketMined, Doc: "the miner's compression cache",
		Grants: map[Identity]Access{Miner: RW, Gateway: Create}},
	{Kind: KindBucket, Base: protocol.BucketToolCalls, Doc: "each tool call's result under its call id (exactly-once effects)",
		Grants: map[Identity]Access{Toolhost: RW, Gateway: Create}},
	{Kind: KindBucket, Base: protocol.BucketSteps, Doc: "finished steps' results, for redeliveries",
		Grants: map[Identity]Access{Executor: RW, Gateway: Create}},
	{Kind: KindBucket, Base: protocol.BucketLedger, Doc: "budget ledger: what each session and each session tree's root has spent",
		// The planner checks and charges its planning calls like the executors their model calls.
		Grants: map[Identity]Access{Executor: RW, Planner: RW, Gateway: Create}},
	{Kind: KindObjectStore, Base: protocol.ObjectPayloads, Doc: "large payloads (tool results over the cap, paged by read_result)",
		Grants: map[Identity]Access{Toolhost: RW, Executor: RW, Gateway: Create}},
}

// Durables are the durable consumers of the mesh and their owners.
var Durables = []Durable{
	{Stream: protocol.StreamTasks, Name: protocol.ConsumerPlanner, Owner: Planner},
	{Stream: protocol.StreamResults, Name: protocol.ConsumerPlannerResults, Owner: Planner},
	{Stream: protocol.StreamDLQ, Name: protocol.ConsumerPlannerDead, Owner: Planner},
	{Stream: protocol.StreamWork, Name: "*", Owner: Executor},
	{Stream: protocol.StreamTrace, Name: protocol.ConsumerMiner, Owner: Miner},
	{Stream: protocol.StreamTrace, Name: protocol.ConsumerMirror, Owner: Gateway},
}

func memRow(op, doc string, callers ...Identity) Row {
	g := map[Identity]Access{Memoryd: Serve}
	for _, c := range callers {
		g[c] |= Call
	}
	return Row{Kind: KindSubject, Base: "memory." + op, Subject: func(n protocol.Names) string { return n.Memory(op) }, Doc: doc, Grants: g}
}

// Provisions reports whether id creates missing streams and buckets at start. Every other role
// waits for them (see Resources).
func Provisions(id Identity) bool { return id == Admin || id == Gateway }

// ResponseTTL bounds the server's one-reply grant (allow_responses) of an identity that serves
// requests. The server keeps an entry per request delivered with a reply subject the identity may
// not publish to otherwise (every message of a consumer it reads, a watch included, carries one),
// for this long unless it is answered: a per-request map that grows with the load for as long as
// this lasts. The mesh's own replies do not need the grant: a server may always publish into its
// callers' inboxes, the admin's included (see For), however long the work takes, so the grant is
// left to requests from outside the matrix (a `$SRV` discovery ping answers at once) and lasts
// seconds.
const ResponseTTL = 10 * time.Second

// InboxPrefix is the reply-subject prefix of an identity, so no identity reads another's replies.
func InboxPrefix(id Identity) string { return "_INBOX." + string(id) }

// StreamName returns the JetStream stream behind a row (KV_x and OBJ_x for buckets).
func (r Row) StreamName(n protocol.Names) string {
	switch r.Kind {
	case KindBucket:
		return "KV_" + n.Bucket(r.Base)
	case KindObjectStore:
		return "OBJ_" + n.Bucket(r.Base)
	case KindStream:
		return n.Stream(r.Base)
	}
	return ""
}

// Resources returns the streams (JetStream names) id touches, so a role that does not provision
// can wait for exactly those.
func Resources(id Identity, n protocol.Names) []string {
	var out []string
	for _, r := range Matrix {
		if r.Kind != KindSubject && r.Grants[id] != 0 {
			out = append(out, r.StreamName(n))
		}
	}
	for _, d := range Durables {
		if d.Owner == id {
			out = append(out, n.Stream(d.Stream))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Perms is one identity's rendered permissions.
type Perms struct {
	PubAllow, PubDeny, SubAllow []string
	Responses                   bool
}

// For renders id's permissions for the mesh named n.
func For(id Identity, n protocol.Names) Perms {
	if id == Admin {
		return Perms{PubAllow: []string{">"}, SubAllow: []string{">"}, Responses: true}
	}
	var p Perms
	pub := map[string]bool{"$JS.API.INFO": true}
	deny := map[string]bool{}
	sub := map[string]bool{InboxPrefix(id) + ".>": true}
	api := "$JS.API."
	for _, r := range Matrix {
		a := r.Grants[id]
		if a == 0 {
			continue
		}
		if r.Kind == KindSubject {
			s := r.Subject(n)
			if a&Serve != 0 {
				sub[s] = true
				sub["$SRV.>"] = true
				p.Responses = true
				// The server's response grant lives on the node that delivered the request, and
				// only for ResponseTTL: a server that reconnects to another node (its node died)
				// while it works, or works longer than that (an agent called as a tool), could not
				// answer. It may therefore always reply into its callers' inboxes, the admin's
				// included (the admin may call anything), which it could answer anyway; it never
				// reads them.
				pub[InboxPrefix(Admin)+".>"] = true
				for c, ca := range r.Grants {
					if ca&Call != 0 && c != id {
						pub[InboxPrefix(c)+".>"] = true
					}
				}
			}
			if a&(Call|Publish) != 0 {
				pub[s] = true
			}
			if a&Subscribe != 0 {
				sub[s] = true
			}
			continue
		}
		st := r.StreamName(n)
		pub[api+"STREAM.INFO."+st] = true
		if a&(Get|Read) != 0 {
			pub[api+"STREAM.MSG.GET."+st] = true
			pub[api+"DIRECT.GET."+st] = true
			pub[api+"DIRECT.GET."+st+".>"] = true
		}
		if a&Read != 0 {
			for _, s := range []string{"CONSUMER.CREATE." + st, "CONSUMER.CREATE." + st + ".>", "CONSUMER.MSG.NEXT." + st + ".*",
				"CONSUMER.INFO." + st + ".*", "CONSUMER.DELETE." + st + ".*"} {
				pub[api+s] = true
			}
			pub["$JS.FC."+st+".>"] = true
		}
		if a&Create != 0 {
			pub[api+"STREAM.CREATE."+st] = true
		}
		switch r.Kind {
		case KindStream:
			if a&Publish != 0 {
				pub[r.Subject(n)] = true
			}
		case KindBucket:
			if a&Write != 0 {
				pub[protocol.KVKey(n.Bucket(r.Base), ">")] = true
			}
		case KindObjectStore:
			if a&Write != 0 {
				pub["$O."+n.Bucket(r.Base)+".>"] = true
				// Deleting or replacing an object purges its chunks.
				pub[api+"STREAM.PURGE."+st] = true
			}
		}
	}
	for _, d := range Durables {
		st := n.Stream(d.Stream)
		c := []string{"CONSUMER.CREATE." + st + "." + d.Name, "CONSUMER.CREATE." + st + "." + d.Name + ".>",
			"CONSUMER.DURABLE.CREATE." + st + "." + d.Name, "CONSUMER.MSG.NEXT." + st + "." + d.Name,
			"CONSUMER.DELETE." + st + "." + d.Name}
		if d.Owner == id {
			for _, s := range c {
				pub[api+s] = true
			}
			pub[api+"CONSUMER.INFO."+st+"."+d.Name] = true
			pub[api+"STREAM.INFO."+st] = true
			pub["$JS.ACK."+st+"."+d.Name+".>"] = true
			continue
		}
		// Nobody else may pull from, replace or delete another identity's durable: taking its
		// messages would hide them from their owner.
		for _, s := range c {
			deny[api+s] = true
		}
		deny["$JS.ACK."+st+"."+d.Name+".>"] = true
	}
	p.PubAllow, p.PubDeny, p.SubAllow = keys(pub), keys(deny), keys(sub)
	return p
}

func keys(m map[string]bool) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
