package bus

import (
	"context"
	"fmt"
	"log/slog"
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
	if err := c.NC.Drain(); err != nil {
		c.NC.Close()
	}
}

// Connect dials url, retrying with backoff until ctx ends or maxWait passes, so services can
// start before the server does.
func Connect(ctx context.Context, url, name string, maxWait time.Duration) (*Conn, error) {
	if url == "" {
		url = DefaultURL
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 2 * time.Second
	b.MaxElapsedTime = maxWait
	var nc *nats.Conn
	err := backoff.Retry(func() error {
		var err error
		nc, err = nats.Connect(url, opts...)
		return err
	}, backoff.WithContext(b, ctx))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (start one with `skein up`, or pass --nats URL)", redact.URL(url), err)
	}
	// Trace events are published asynchronously; a lost one must at least be said.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
		slog.Warn("async publish failed", "subject", m.Subject, "err", err)
	}))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream on %s: %w", redact.URL(url), err)
	}
	return &Conn{NC: nc, JS: js}, nil
}
