package sessiontest

import (
	"context"
	"fmt"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Send is Submit for a caller that handles a refusal itself: a goroutine other than the test's
// (which must not call t.Fatal), a load generator that counts failures, a client that retries
// while a fault is injected. It returns the session id, or why the task was not taken; a
// refusal keeps the reply's code (protocol.CodeOf).
func Send(ctx context.Context, c *bus.Conn, names protocol.Names, req protocol.SubmitRequest) (string, error) {
	var reply protocol.SubmitReply
	if err := bus.Request(ctx, c.NC, names.Submit(), &req, &reply, 5*time.Second); err != nil {
		return "", fmt.Errorf("submit %q: %w", req.Task, err)
	}
	if err := reply.Err(); err != nil {
		return "", fmt.Errorf("submit %q refused: %w", req.Task, err)
	}
	return reply.SessionID, nil
}
