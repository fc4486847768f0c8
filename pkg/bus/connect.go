package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/redact"
)

// DefaultURL is where a mesh is looked for when no URL is configured.
const DefaultURL = "nats://127.0.0.1:4222"

// Conn is a NATS connection with its JetStream context.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream
}

// Close drains the connection so in-flight acks and publishes finish.
func (c *Conn) Close() {
	if c == nil || c.NC == nil {
		return
	}
	denials.Delete(c.NC)
	if err := c.NC.Drain(); err != nil {
		c.NC.Close()
	}
}

// Connect dials url, retrying with backoff until ctx ends or maxWait passes, so services can
// start before the server does. A refused identity is not retried.
func Connect(ctx context.Context, url, name string, maxWait time.Duration, options ...Option) (*Conn, error) {
	if url == "" {
		url = DefaultURL
	}
	var do dialOptions
	for _, o := range options {
		o(&do)
	}
	credOpts, extra, id, err := do.natsOptions()
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(errorHandler(name, id)),
	}, extra...)
	withCreds := append(slices.Clone(opts), credOpts...)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 2 * time.Second
	b.MaxElapsedTime = maxWait
	var nc *nats.Conn
	err = backoff.Retry(func() error {
		var err error
		nc, err = nats.Connect(url, withCreds...)
		if errors.Is(err, nats.ErrNkeysNotSupported) {
			// A server without authentication (a bare `nats-server -js`): it admits anyone, so
			// the credentials found in SKEIN_HOME are not needed. Say so, since it is open.
			slog.Warn("the NATS server has no authentication: connecting without credentials; anyone who reaches it can use the mesh (docs/security.md)", "url", url, "connection", name)
			withCreds = opts
			nc, err = nats.Connect(url, withCreds...)
		}
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return backoff.Permanent(authError(url, do, err))
		}
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil {
		var ae *AuthError
		if errors.As(err, &ae) {
			return nil, ae
		}
		return nil, fmt.Errorf("connect to NATS at %s: %w (start one with `skein up`, or pass --nats URL)", redact.URL(url), err)
	}
	denials.Store(nc, &denyWatch{})
	// Trace events are published asynchronously; a lost one must at least be said.
	asyncTimeout := do.asyncTimeout
	if asyncTimeout <= 0 {
		asyncTimeout = AsyncPublishTimeout
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
		slog.Warn("async publish failed", "subject", m.Subject, "err", err)
	}), jetstream.WithPublishAsyncTimeout(asyncTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream on %s: %w", redact.URL(url), err)
	}
	return &Conn{NC: nc, JS: js}, nil
}
