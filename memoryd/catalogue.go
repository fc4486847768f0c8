package memoryd

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// catalogueTTL is how long the tool names read from the catalogue serve the lesson gate before
// they are read again.
const catalogueTTL = 30 * time.Second

// catalogue is the names of the mesh's tools (the keys of the tools bucket), which the lesson
// gate compares a lesson's words with to tell a tool its session never used.
type catalogue struct {
	conn *bus.Conn
	mesh protocol.Names
	log  *slog.Logger

	mu     sync.Mutex
	tools  []string
	at     time.Time
	warned bool
}

func (c *catalogue) toolNames(ctx context.Context) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < catalogueTTL {
		return c.tools
	}
	tools, err := c.read(ctx)
	if err != nil {
		if !c.warned {
			c.log.Warn("lesson gate: cannot read the tool catalogue, so lessons naming tools their session never used are not caught; grant memoryd read access to the tools bucket", "err", err)
			c.warned = true
		}
		return c.tools
	}
	c.tools, c.at, c.warned = tools, time.Now(), false
	return tools
}

func (c *catalogue) read(ctx context.Context) ([]string, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := bus.KV(rctx, c.conn.JS, c.mesh, protocol.BucketTools)
	if err != nil {
		return nil, err
	}
	keys, err := kv.Keys(rctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return []string{}, nil
	}
	return keys, err
}
