package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/auth"
)

// Option changes how Connect dials.
type Option func(*dialOptions)

type dialOptions struct {
	creds        string
	identity     auth.Identity
	tls          TLSFiles
	asyncTimeout time.Duration
	inProcess    nats.InProcessConnProvider
}

// AsyncPublishTimeout bounds how long an asynchronous publish (trace events) waits for its ack.
// An ack lost in a stream leader's election otherwise stays pending for good, and every later
// wait for the pending publishes (trace.Publisher.Flush before a step's result) times out with it.
// It is shorter than those waits (10 s), so the next one sees the failure and passes.
const AsyncPublishTimeout = 5 * time.Second

// WithAsyncPublishTimeout replaces AsyncPublishTimeout for this connection.
func WithAsyncPublishTimeout(d time.Duration) Option {
	return func(o *dialOptions) { o.asyncTimeout = d }
}

// WithCreds connects with the credentials file at path (an nkey seed file as skein writes it, or
// a NATS user .creds file). An empty path connects without credentials.
func WithCreds(path string) Option { return func(o *dialOptions) { o.creds = path } }

// WithIdentity is the identity the credentials are for when their file does not say (a seed
// file under a name other than <identity>.nk): replies then come on its inbox prefix.
func WithIdentity(id auth.Identity) Option { return func(o *dialOptions) { o.identity = id } }

// WithInProcess connects to a server running in this process through memory instead of a
// socket: the services `skein up` runs beside its embedded server. The connection still
// presents its credentials and gets its identity's permissions; it needs no TLS, since nothing
// leaves the process. Its object stores are written over the socket all the same (see
// Conn.ObjectStores), with the other options given (WithTLS among them).
func WithInProcess(s nats.InProcessConnProvider) Option {
	return func(o *dialOptions) { o.inProcess = s }
}

// TLSFiles is the mesh.tls block: CA to trust, and a certificate and key to present.
type TLSFiles struct {
	CA, Cert, Key string
}

// Enabled reports whether any file is set.
func (t TLSFiles) Enabled() bool { return t.CA != "" || t.Cert != "" || t.Key != "" }

// WithTLS makes the connection use TLS: t.CA verifies the server, t.Cert/t.Key are the client
// certificate (when the server asks for one).
func WithTLS(t TLSFiles) Option { return func(o *dialOptions) { o.tls = t } }

// natsOptions turns the dial options into nats.go options: those that present the credentials,
// and the rest; it returns the identity the credentials name ("" when unknown).
func (o dialOptions) natsOptions() (creds, opts []nats.Option, id auth.Identity, err error) {
	if o.creds != "" {
		k, err := auth.Load(o.creds)
		if err != nil {
			return nil, nil, "", fmt.Errorf("NATS credentials: %w", err)
		}
		if k.JWT {
			creds = append(creds, nats.UserCredentials(o.creds))
		} else {
			opt, err := nats.NkeyOptionFromSeed(o.creds)
			if err != nil {
				return nil, nil, "", fmt.Errorf("NATS credentials %s: %w", o.creds, err)
			}
			creds = append(creds, opt)
		}
		if id = k.Identity; id == "" && !k.JWT {
			id = o.identity
		}
		if id != "" {
			// Replies come back on the identity's own inbox prefix, the only one it may read.
			creds = append(creds, nats.CustomInboxPrefix(auth.InboxPrefix(id)))
		}
	}
	if o.inProcess != nil {
		opts = append(opts, nats.InProcessServer(o.inProcess))
	} else if o.tls.Enabled() {
		if o.tls.CA != "" {
			opts = append(opts, nats.RootCAs(o.tls.CA))
		}
		if o.tls.Cert != "" || o.tls.Key != "" {
			if o.tls.Cert == "" || o.tls.Key == "" {
				return nil, nil, "", fmt.Errorf("mesh.tls: cert and key go together (got cert %q, key %q)", o.tls.Cert, o.tls.Key)
			}
			opts = append(opts, nats.ClientCert(o.tls.Cert, o.tls.Key))
		}
		opts = append(opts, nats.Secure())
	}
	return creds, opts, id, nil
}

// errorHandler says clearly when the server refused something this process did: a permission
// violation otherwise shows only as a request timing out.
func errorHandler(name string, id auth.Identity) nats.ErrHandler {
	return func(nc *nats.Conn, sub *nats.Subscription, err error) {
		noteDenial(nc, err)
		if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			who := string(id)
			if who == "" {
				who = "this connection"
			}
			slog.Error("NATS refused an operation: the identity's permissions do not allow it (see docs/security.md)",
				"connection", name, "identity", who, "err", err)
			return
		}
		if sub != nil {
			slog.Warn("NATS async error", "connection", name, "subject", sub.Subject, "err", err)
			return
		}
		slog.Warn("NATS async error", "connection", name, "err", err)
	}
}

// AuthError is a connection the server refused for its identity; its message is the one line a
// user needs.
type AuthError struct{ msg string }

func (e *AuthError) Error() string { return e.msg }

// authError is the one line a refused connection gets.
func authError(url string, o dialOptions, err error) error {
	if o.creds == "" {
		return &AuthError{fmt.Sprintf("NATS at %s refused a connection without credentials: pass --creds FILE, set SKEIN_CREDS or mesh.creds_file, or run with the SKEIN_HOME of the mesh (its creds/ folder) (%v)", url, err)}
	}
	return &AuthError{fmt.Sprintf("NATS at %s refused the credentials in %s: the mesh does not know this identity (credentials from another mesh, or rotated?) (%v)", url, o.creds, err)}
}
