package main

import (
	"context"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// waitMirrored returns once the embedded mesh's trace mirror has written every trace event stored
// so far (or after limit). The mirror's per-session signal fires at the first usage event, but an
// embedded run also follows the miner's events after it; the mirror consumer acks each event only
// after writing it, so "nothing pending, nothing unacked" means the files hold all of them.
func waitMirrored(ctx context.Context, m *embeddedMesh, names protocol.Names, session string, limit time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	select {
	case <-m.mirror.Done(session):
	case <-ctx.Done():
		return
	}
	c, err := m.conn("mirror-wait")
	if err != nil {
		return
	}
	cons, err := c.JS.Consumer(ctx, names.Stream(protocol.StreamTrace), protocol.ConsumerMirror)
	if err != nil {
		return
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil || (info.NumPending == 0 && info.NumAckPending == 0) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
