package memoryd

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

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

// replyErr is a reply's error, coded, with the operation named.
func replyErr(op string, rep protocol.Reply) error {
	if err := rep.Err(); err != nil {
		return fmt.Errorf("memoryd %s: %w", op, err)
	}
	return nil
}

func (c Client) Retrieve(ctx context.Context, req protocol.RetrieveRequest) ([]protocol.Guideline, error) {
	var rep protocol.RetrieveReply
	if err := c.call(ctx, protocol.MemRetrieve, &req, &rep); err != nil {
		return nil, err
	}
	return rep.Guidelines, replyErr(protocol.MemRetrieve, &rep)
}

// RetrieveReply returns the whole answer: guidelines, and the worked examples and skills req
// asks for.
func (c Client) RetrieveReply(ctx context.Context, req protocol.RetrieveRequest) (*protocol.RetrieveReply, error) {
	var rep protocol.RetrieveReply
	if err := c.call(ctx, protocol.MemRetrieve, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemRetrieve, &rep)
}

func (c Client) Ingest(ctx context.Context, req protocol.IngestRequest) ([]protocol.IngestAction, error) {
	var rep protocol.IngestReply
	if err := c.call(ctx, protocol.MemIngest, &req, &rep); err != nil {
		return nil, err
	}
	return rep.Actions, replyErr(protocol.MemIngest, &rep)
}

// Remember stores notes from inside a session (see protocol.RememberRequest).
func (c Client) Remember(ctx context.Context, req protocol.RememberRequest) ([]protocol.IngestAction, error) {
	var rep protocol.RememberReply
	if err := c.call(ctx, protocol.MemRemember, &req, &rep); err != nil {
		return nil, err
	}
	return rep.Actions, replyErr(protocol.MemRemember, &rep)
}

func (c Client) Feedback(ctx context.Context, req protocol.FeedbackRequest) error {
	var rep protocol.Ack
	if err := c.call(ctx, protocol.MemFeedback, &req, &rep); err != nil {
		return err
	}
	return replyErr(protocol.MemFeedback, &rep)
}

func (c Client) Inspect(ctx context.Context, req protocol.MemoryInspectRequest) (*protocol.MemoryInspectReply, error) {
	var rep protocol.MemoryInspectReply
	if err := c.call(ctx, protocol.MemInspect, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemInspect, &rep)
}

func (c Client) List(ctx context.Context, req protocol.MemoryListRequest) (*protocol.MemoryListReply, error) {
	var rep protocol.MemoryListReply
	if err := c.call(ctx, protocol.MemList, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemList, &rep)
}

// ListAll pages through every entry that passes the request's filter.
func (c Client) ListAll(ctx context.Context, req protocol.MemoryListRequest) ([]memory.Entry, error) {
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
	var rep protocol.MemoryGetReply
	if err := c.call(ctx, protocol.MemGet, &protocol.MemoryGetRequest{ID: id}, &rep); err != nil {
		return nil, err
	}
	return rep.Entry, replyErr(protocol.MemGet, &rep)
}

func (c Client) Import(ctx context.Context, req protocol.MemoryImportRequest) (*protocol.MemoryImportReply, error) {
	var rep protocol.MemoryImportReply
	if err := c.call(ctx, protocol.MemImport, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemImport, &rep)
}

func (c Client) Evict(ctx context.Context, req protocol.MemoryEvictRequest) (*protocol.MemoryEvictReply, error) {
	var rep protocol.MemoryEvictReply
	if err := c.call(ctx, protocol.MemEvict, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemEvict, &rep)
}

func (c Client) Migrate(ctx context.Context) (*protocol.MemoryMigrateReply, error) {
	var rep protocol.MemoryMigrateReply
	if err := c.call(ctx, protocol.MemMigrate, &protocol.MemoryMigrateRequest{}, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemMigrate, &rep)
}

func (c Client) Repair(ctx context.Context) (*protocol.MemoryRepairReply, error) {
	var rep protocol.MemoryRepairReply
	if err := c.call(ctx, protocol.MemRepair, &protocol.MemoryRepairRequest{}, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemRepair, &rep)
}

func (c Client) Health(ctx context.Context) (*protocol.MemoryHealthReply, error) {
	var rep protocol.MemoryHealthReply
	if err := c.call(ctx, protocol.MemHealth, &protocol.MemoryHealthRequest{}, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

func (c Client) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	var rep protocol.MemoryEmbedReply
	if err := c.call(ctx, protocol.MemEmbed, &protocol.MemoryEmbedRequest{Texts: texts}, &rep); err != nil {
		return nil, err
	}
	return rep.Vectors, replyErr(protocol.MemEmbed, &rep)
}

func (c Client) Retire(ctx context.Context, req protocol.MemoryRetireRequest) (*protocol.MemoryRetireReply, error) {
	var rep protocol.MemoryRetireReply
	if err := c.call(ctx, protocol.MemRetire, &req, &rep); err != nil {
		return nil, err
	}
	return &rep, replyErr(protocol.MemRetire, &rep)
}
