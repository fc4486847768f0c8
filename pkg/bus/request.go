package bus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Request sends req on subject and decodes the reply into reply. A missing responder or a
// timeout is retried with backoff until ctx ends, because services may still be starting; any
// other error is returned at once.
func Request(ctx context.Context, nc *nats.Conn, subject string, req, reply protocol.Message, perTry time.Duration) error {
	data, err := protocol.Marshal(req)
	if err != nil {
		return err
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = time.Second
	b.MaxElapsedTime = 0 // bounded by ctx
	var msg *nats.Msg
	err = backoff.Retry(func() error {
		tctx, cancel := context.WithTimeout(ctx, perTry)
		defer cancel()
		var denied atomic.Pointer[error]
		stop := onDenied(nc, subject, func(e error) { denied.Store(&e); cancel() })
		msg, err = nc.RequestWithContext(tctx, subject, data)
		stop()
		if d := denied.Load(); d != nil {
			return backoff.Permanent(fmt.Errorf("this connection's identity may not send to %s (see docs/security.md): %w", subject, *d))
		}
		if err == nil {
			return nil
		}
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			if ctx.Err() != nil {
				return backoff.Permanent(err)
			}
			return err
		}
		return backoff.Permanent(err)
	}, backoff.WithContext(b, ctx))
	if err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if e := msg.Header.Get("Nats-Service-Error"); e != "" {
		return fmt.Errorf("request %s: service error: %s", subject, e)
	}
	if err := protocol.Unmarshal(msg.Data, reply); err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	return nil
}
