package memoryd

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/ingest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Wire types of the operations pkg/protocol does not define (inspect, list, get, import, evict,
// migrate, health, embed). They are schema-versioned like every protocol message.

// InspectRequest asks for counts per tier and the entries nearest a query.
type InspectRequest struct {
	protocol.Header
	Agent string        `msgpack:"agent,omitempty" json:"agent,omitempty"`
	Query string        `msgpack:"query,omitempty" json:"query,omitempty"`
	TopK  int           `msgpack:"top_k,omitempty" json:"top_k,omitempty"`
	Tier  protocol.Tier `msgpack:"tier,omitempty" json:"tier,omitempty"`
}

// Count is the number of entries of one agent in one tier and status.
type Count struct {
	Agent  string        `msgpack:"agent" json:"agent"`
	Tier   protocol.Tier `msgpack:"tier" json:"tier"`
	Status memory.Status `msgpack:"status" json:"status"`
	N      int           `msgpack:"n" json:"n"`
}

// Scored is an entry with its similarity to a query (embedding stripped).
type Scored struct {
	Entry memory.Entry `msgpack:"entry" json:"entry"`
	Score float64      `msgpack:"score" json:"score"`
}

// InspectReply answers InspectRequest.
type InspectReply struct {
	protocol.Header
	Counts []Count   `msgpack:"counts" json:"counts"`
	Hits   []Scored  `msgpack:"hits,omitempty" json:"hits,omitempty"`
	Model  string    `msgpack:"model" json:"model"`
	Error  string    `msgpack:"error,omitempty" json:"error,omitempty"`
	At     time.Time `msgpack:"at" json:"at"`
}

// ListRequest pages through entries (status "" means active, "*" every status).
type ListRequest struct {
	protocol.Header
	Agent  string        `msgpack:"agent,omitempty" json:"agent,omitempty"`
	Tier   protocol.Tier `msgpack:"tier,omitempty" json:"tier,omitempty"`
	Status memory.Status `msgpack:"status,omitempty" json:"status,omitempty"`
	Offset int           `msgpack:"offset,omitempty" json:"offset,omitempty"`
	Limit  int           `msgpack:"limit,omitempty" json:"limit,omitempty"`
}

// ListReply is one page, ordered by agent, tier (strategic first) and id; embeddings stripped.
type ListReply struct {
	protocol.Header
	Entries []memory.Entry `msgpack:"entries" json:"entries"`
	Total   int            `msgpack:"total" json:"total"`
	Error   string         `msgpack:"error,omitempty" json:"error,omitempty"`
}

// GetRequest asks for one entry.
type GetRequest struct {
	protocol.Header
	ID string `msgpack:"id" json:"id"`
}

// GetReply carries the entry (embedding stripped), or Error.
type GetReply struct {
	protocol.Header
	Entry *memory.Entry `msgpack:"entry,omitempty" json:"entry,omitempty"`
	Error string        `msgpack:"error,omitempty" json:"error,omitempty"`
}

// ImportRequest writes entries (from `skein memory export`, or hand-written). Each is re-embedded
// with memoryd's model. An existing id is skipped unless Replace.
type ImportRequest struct {
	protocol.Header
	Entries []memory.Entry `msgpack:"entries" json:"entries"`
	Replace bool           `msgpack:"replace,omitempty" json:"replace,omitempty"`
}

// ImportReply counts what happened.
type ImportReply struct {
	protocol.Header
	Imported int      `msgpack:"imported" json:"imported"`
	Skipped  int      `msgpack:"skipped" json:"skipped"`
	Problems []string `msgpack:"problems,omitempty" json:"problems,omitempty"`
	Error    string   `msgpack:"error,omitempty" json:"error,omitempty"`
}

// EvictRequest runs the capacity policy now (agent "" = every agent).
type EvictRequest struct {
	protocol.Header
	Agent  string `msgpack:"agent,omitempty" json:"agent,omitempty"`
	DryRun bool   `msgpack:"dry_run,omitempty" json:"dry_run,omitempty"`
}

// EvictReply lists the entries removed, or that would be.
type EvictReply struct {
	protocol.Header
	Evicted  []ingest.Eviction `msgpack:"evicted" json:"evicted"`
	DryRun   bool              `msgpack:"dry_run" json:"dry_run"`
	Capacity int               `msgpack:"capacity" json:"capacity"`
	Error    string            `msgpack:"error,omitempty" json:"error,omitempty"`
}

// MigrateRequest re-embeds every entry with memoryd's current model.
type MigrateRequest struct {
	protocol.Header
}

// MigrateReply reports the migration.
type MigrateReply struct {
	protocol.Header
	Reembedded int    `msgpack:"reembedded" json:"reembedded"`
	From       string `msgpack:"from" json:"from"`
	Model      string `msgpack:"model" json:"model"`
	Error      string `msgpack:"error,omitempty" json:"error,omitempty"`
}

// HealthRequest asks whether memoryd is serving.
type HealthRequest struct {
	protocol.Header
}

// HealthReply describes the store and model. OK is false while a migration is needed.
type HealthReply struct {
	protocol.Header
	OK      bool   `msgpack:"ok" json:"ok"`
	Store   string `msgpack:"store" json:"store"`
	Model   string `msgpack:"model" json:"model"`
	Dim     int    `msgpack:"dim" json:"dim"`
	Entries int    `msgpack:"entries" json:"entries"`
	Error   string `msgpack:"error,omitempty" json:"error,omitempty"`
}

// EmbedRequest asks for vectors of texts with memoryd's model.
type EmbedRequest struct {
	protocol.Header
	Texts []string `msgpack:"texts" json:"texts"`
}

// EmbedReply carries one vector per text.
type EmbedReply struct {
	protocol.Header
	Vectors [][]float32 `msgpack:"vectors" json:"vectors"`
	Model   string      `msgpack:"model" json:"model"`
	Error   string      `msgpack:"error,omitempty" json:"error,omitempty"`
}

// Client calls memoryd over NATS; the CLI, the miner and tests use it.
type Client struct {
	NC    *nats.Conn
	Names protocol.Names
	// PerTry bounds one attempt; the caller's context bounds the whole call.
	PerTry time.Duration
}

func (c Client) call(ctx context.Context, op string, req, rep protocol.Message) error {
	per := c.PerTry
	if per <= 0 {
		per = 30 * time.Second
	}
	return bus.Request(ctx, c.NC, c.Names.Memory(op), req, rep, per)
}

func replyErr(op, msg string) error {
	if msg == "" {
		return nil
	}
	return fmt.Errorf("memoryd %s: %s", op, msg)
}

func (c Client) Retrieve(ctx context.Context, req protocol.RetrieveRequest) ([]protocol.Guideline, error) {
	var rep protocol.RetrieveReply
	if err := c.call(ctx, protocol.MemRetrieve, &req, &rep); err != nil {
		return nil, err
	}
	return rep.Guidelines, replyErr(protocol.MemRetrieve, rep.Error)
}

func (c Client) Ingest(ctx context.Context, req protocol.IngestRequest) ([]protocol.IngestAction, error) {
	var rep protocol.IngestReply
	if err := c.call(ctx, protocol.MemIngest, &req, &rep); err != nil {
		return nil, err
	}
	return rep.Actions, replyErr(protocol.MemIngest, rep.Error)
}

func (c Client) Feedback(ctx context.Context, req protocol.FeedbackRequest) error {
	var rep protocol.Ack
	if err := c.call(ctx, protocol.MemFeedback, &req, &rep); err != nil {
		return err
	}
	return replyErr(protocol.MemFeedback, rep.Error)
}

func (c Client) Inspect(ctx context.Context, req InspectRequest) (*InspectReply, error) {
	var rep InspectReply
	if err := c.call(ctx, protocol.MemInspect, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemInspect, rep.Error)
}

func (c Client) List(ctx context.Context, req ListRequest) (*ListReply, error) {
	var rep ListReply
	if err := c.call(ctx, protocol.MemList, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemList, rep.Error)
}

// ListAll pages through every entry that passes the request's filter.
func (c Client) ListAll(ctx context.Context, req ListRequest) ([]memory.Entry, error) {
	req.Limit = 200
	var out []memory.Entry
	for {
		rep, err := c.List(ctx, req)
		if err != nil {
			return out, err
		}
		out = append(out, rep.Entries...)
		req.Offset += len(rep.Entries)
		if len(rep.Entries) == 0 || req.Offset >= rep.Total {
			return out, nil
		}
	}
}

func (c Client) Get(ctx context.Context, id string) (*memory.Entry, error) {
	var rep GetReply
	if err := c.call(ctx, protocol.MemGet, &GetRequest{ID: id}, &rep); err != nil {
		return nil, err
	}
	return rep.Entry, replyErr(protocol.MemGet, rep.Error)
}

func (c Client) Import(ctx context.Context, req ImportRequest) (*ImportReply, error) {
	var rep ImportReply
	if err := c.call(ctx, protocol.MemImport, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemImport, rep.Error)
}

func (c Client) Evict(ctx context.Context, req EvictRequest) (*EvictReply, error) {
	var rep EvictReply
	if err := c.call(ctx, protocol.MemEvict, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemEvict, rep.Error)
}

func (c Client) Migrate(ctx context.Context) (*MigrateReply, error) {
	var rep MigrateReply
	if err := c.call(ctx, protocol.MemMigrate, &MigrateRequest{}, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemMigrate, rep.Error)
}

func (c Client) Health(ctx context.Context) (*HealthReply, error) {
	var rep HealthReply
	if err := c.call(ctx, protocol.MemHealth, &HealthRequest{}, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

func (c Client) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	var rep EmbedReply
	if err := c.call(ctx, protocol.MemEmbed, &EmbedRequest{Texts: texts}, &rep); err != nil {
		return nil, err
	}
	return rep.Vectors, replyErr(protocol.MemEmbed, rep.Error)
}
