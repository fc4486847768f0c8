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
//
// A refusal that comes with its reply (every skein service's) is decoded into reply and returns
// nil: the reply's Err says why, with its code. Every error Request returns itself carries a code
// too (protocol.CodeOf): unavailable when nothing answered, timeout, forbidden when the
// connection's identity may not send to subject, or the code of a refusal without a body.
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
	var (
		msg  *nats.Msg
		last error // the last error of a try ctx did not cut short: nothing answered, or a slow answer
	)
	err = backoff.Retry(func() error {
		tctx, cancel := context.WithTimeout(ctx, perTry)
		defer cancel()
		var denied atomic.Pointer[error]
		stop := onDenied(nc, subject, func(e error) { denied.Store(&e); cancel() })
		msg, err = nc.RequestWithContext(tctx, subject, data)
		stop()
		if d := denied.Load(); d != nil {
			return backoff.Permanent(protocol.Wrap(protocol.CodeForbidden,
				fmt.Errorf("this connection's identity may not send to %s (see docs/security.md): %w", subject, *d)))
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return backoff.Permanent(err)
		}
		last = err
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
		if errors.Is(last, nats.ErrNoResponders) && !errors.Is(err, nats.ErrNoResponders) {
			err = fmt.Errorf("%w (nothing answers on %s)", err, subject)
			return protocol.Wrap(protocol.CodeUnavailable, fmt.Errorf("request %s: %w", subject, err))
		}
		return protocol.Wrap(Classify(err), fmt.Errorf("request %s: %w", subject, err))
	}
	if e := msg.Header.Get(micro.ErrorHeader); e != "" {
		refused := protocol.Errorf(protocol.CodeOfStatus(msg.Header.Get(micro.ErrorCodeHeader)), "request %s: %s", subject, e)
		if len(msg.Data) > 0 && protocol.Unmarshal(msg.Data, reply) == nil {
			// A reply whose body does not say it failed (a build that wrote no code) is
			// failed from the headers.
			if r, ok := reply.(protocol.Failable); ok && r.Err() == nil {
				r.Fail(refused)
			}
			return nil
		}
		return refused
	}
	if err := protocol.Unmarshal(msg.Data, reply); err != nil {
		return protocol.Wrap(protocol.CodeInternal, fmt.Errorf("request %s: %w", subject, err))
	}
	return nil
}
