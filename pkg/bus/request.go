package bus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Request sends req on subject and decodes the reply into reply. A missing responder is retried
// with backoff until ctx ends, because services may still be starting. A timeout is retried only
// when req is protocol.Idempotent: a request that timed out may have been served with its reply
// lost, and sending a non-idempotent one again could do its work twice. Any other error is
// returned at once.
func Request(ctx context.Context, nc *nats.Conn, subject string, req, reply protocol.Message, perTry time.Duration) error {
	if err := CheckSubject(subject); err != nil {
		return fmt.Errorf("request: %w", err)
	}
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
		if ctx.Err() != nil {
			return backoff.Permanent(err)
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			if idem, ok := req.(protocol.Idempotent); ok && idem.Idempotent() {
				return err
			}
			return backoff.Permanent(fmt.Errorf("%w (not retried: the request is not idempotent)", err))
		}
		return backoff.Permanent(err)
	}, backoff.WithContext(b, ctx))
	if err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if e := msg.Header.Get(micro.ErrorHeader); e != "" {
		// The gateway's refusals carry their reply too, whose Error and Code the caller reads;
		// a service error without one (memoryd's, a tool's) is the error itself.
		if len(msg.Data) > 0 && protocol.Unmarshal(msg.Data, reply) == nil {
			return nil
		}
		return fmt.Errorf("request %s: service error %s: %s", subject, msg.Header.Get(micro.ErrorCodeHeader), e)
	}
	if err := protocol.Unmarshal(msg.Data, reply); err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	return nil
}
