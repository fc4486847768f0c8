// Package bus connects skein processes to NATS: connections with retry, idempotent provisioning
// of every stream and bucket, and the request/reply and dead-letter plumbing all services share.
// The in-process server of the local default is package bus/embedded.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
)

// DefaultURL is where a mesh is looked for when no URL is configured.
const DefaultURL = "nats://127.0.0.1:4222"

// Conn is a NATS connection with its JetStream context.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream

	// dialObjects, set on a connection in memory, dials the socket connection objects are
	// written through (see ObjectStores); objects is that connection once dialled.
	dialObjects func(context.Context) (*Conn, error)
	objMu       sync.Mutex
	objects     *Conn

	// storage is the last answer of Storage, from storageAt.
	storageMu sync.Mutex
	storage   protocol.StorageReply
	storageAt time.Time
	// lost is closed when the server closed the connection for good (nats.go reconnects after a
	// network failure, but not after the server refused what it sent, e.g. a line over its
	// max_control_line); lostErr says why. closing marks a Close of ours, which is no loss.
	lost     chan struct{}
	lostOnce sync.Once
	lostErr  error
	closing  atomic.Bool
}

// Lost is closed when the connection is closed for good by anything but Close: the role using
// it cannot serve any more and should stop, so that its supervisor starts it again (a role
// binary exits non-zero: service.Main; `skein up` stops the mesh).
func (c *Conn) Lost() <-chan struct{} { return c.lost }

// LostErr says why the connection was lost (nil while it is not).
func (c *Conn) LostErr() error {
	select {
	case <-c.lost:
		return c.lostErr
	default:
		return nil
	}
}

// closed is the connection's closed handler.
func (c *Conn) closed(name string, nc *nats.Conn) {
	if c.closing.Load() {
		return
	}
	c.lostOnce.Do(func() {
		c.lostErr = nc.LastError()
		if c.lostErr == nil {
			c.lostErr = errors.New("closed by the server")
		}
		slog.Error("NATS closed this connection and it will not be reconnected; whatever uses it must restart",
			"connection", name, "err", c.lostErr)
		close(c.lost)
	})
}

// ObjectStores is the JetStream context to open object stores through. It is JS, except on a
// connection in memory: there it is a second connection, over the server's socket, dialled on
// first use. nats.go's object store Put (v1.55.0) starts a goroutine on every call that waits
// forever when all the call's acknowledgements are back before that goroutine first runs, and
// in memory they come back that fast; over a socket they do not (docs/benchmarks.md).
func (c *Conn) ObjectStores(ctx context.Context) (jetstream.JetStream, error) {
	if c.dialObjects == nil {
		return c.JS, nil
	}
	c.objMu.Lock()
	defer c.objMu.Unlock()
	if c.objects != nil && c.objects.NC.IsClosed() {
		c.objects = nil // lost (see Lost): dial it again
	}
	if c.objects == nil {
		o, err := c.dialObjects(ctx)
		if err != nil {
			return nil, fmt.Errorf("connection for object stores: %w", err)
		}
		c.objects = o
	}
	return c.objects.JS, nil
}

// Close drains the connection so in-flight acks and publishes finish.
func (c *Conn) Close() {
	if c == nil || c.NC == nil {
		return
	}
	c.closing.Store(true)
	c.objMu.Lock()
	if c.objects != nil {
		c.objects.Close()
		c.objects = nil
	}
	c.dialObjects = nil
	c.objMu.Unlock()
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
	return connect(ctx, url, name, maxWait, do)
}

func connect(ctx context.Context, url, name string, maxWait time.Duration, do dialOptions) (*Conn, error) {
	socketURL := url
	if do.inProcess != nil {
		// tls:// would make the client insist on TLS, which a connection in memory has no use for.
		if _, hostPort, ok := strings.Cut(url, "://"); ok {
			url = "nats://" + hostPort
		}
	}
	credOpts, extra, id, err := do.natsOptions()
	if err != nil {
		return nil, err
	}
	c := &Conn{lost: make(chan struct{})}
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(errorHandler(name, id)),
		nats.ClosedHandler(func(nc *nats.Conn) { c.closed(name, nc) }),
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
		if err != nil && do.inProcess != nil {
			// The server is this process's own and already up: nothing to wait for. It closes
			// the pipe on a connection it refuses, without saying why.
			return backoff.Permanent(fmt.Errorf("the server in this process refused the connection (credentials %q): %w", do.creds, err))
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
	c.NC, c.JS = nc, guardedJS{js}
	if do.inProcess != nil {
		overSocket := do
		overSocket.inProcess = nil
		c.dialObjects = func(ctx context.Context) (*Conn, error) {
			return connect(ctx, socketURL, name+"-objects", maxWait, overSocket)
		}
	}
	return c, nil
}
