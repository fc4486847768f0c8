// Package embedded runs the NATS server in process: the local default mesh (`skein up`,
// `skein run`) and the tests' servers. It is apart from package bus, which every role links, so
// that nats-server is linked only into the binary that embeds it (the CLI).
package embedded

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Options configures an in-process NATS server.
type Options struct {
	// StoreDir holds JetStream files; it is created if missing.
	StoreDir string
	// Listen is host:port; port 0 (or "127.0.0.1:-1") picks a free port.
	Listen string
	// Name identifies the server in logs and cluster views.
	Name string
	// Logger receives the server's own log lines: warnings and errors (a store that meets "no
	// space left on device") at Warn and Error, its notices (start-up, streams restored) at
	// Debug. nil: warnings and errors go to slog.Default().
	Logger *slog.Logger
	// CredsDir holds one credentials file per identity (created on first start, see auth.Ensure);
	// the server admits only those identities, each with its row of the permission matrix.
	// Empty means no authentication (tests of code that does not care).
	CredsDir string
	// Names is the mesh whose subjects the permissions name.
	Names protocol.Names
	// TLS, when Cert and Key are set, makes the server speak TLS; with CA it also requires client
	// certificates signed by it.
	TLS bus.TLSFiles
	// MaxStore is JetStream's file store limit in bytes; zero means DefaultMaxStore.
	MaxStore int64
}

// DefaultMaxStore is the embedded server's JetStream file store limit. JetStream reserves each
// stream's and bucket's max_bytes against this limit when it is created; left unset, the limit is
// 75% of the disk's free space at start, and a mesh whose mesh.limits add up to more (about 14 GiB
// by default) is refused on a fuller disk although it holds almost nothing yet. mesh.limits are
// what bound the mesh's storage; this only keeps the server from refusing them up front.
const DefaultMaxStore int64 = 1 << 40

// Server is a running in-process server.
type Server struct {
	Server *server.Server
	// dir is the JetStream store directory; opts what the server was started with.
	dir  string
	opts *server.Options
}

// URL is the client URL of the server.
func (e *Server) URL() string { return e.Server.ClientURL() }

// Shutdown stops the server and waits for it.
func (e *Server) Shutdown() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
}

// Start starts a JetStream-enabled NATS server in this process.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("embedded nats: no store directory")
	}
	if err := os.MkdirAll(o.StoreDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded nats: create %s: %w", o.StoreDir, err)
	}
	dir, err := filepath.Abs(o.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	host, port := "127.0.0.1", -1
	if o.Listen != "" {
		h, p, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: listen address %q: %w", o.Listen, err)
		}
		if h != "" {
			host = h
		}
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("embedded nats: listen port %q: %w", p, err)
		}
		if port == 0 {
			port = -1
		}
	}
	name := o.Name
	if name == "" {
		name = "skein-embedded"
	}
	opts := &server.Options{
		ServerName:        name,
		Host:              host,
		Port:              port,
		JetStream:         true,
		StoreDir:          dir,
		JetStreamMaxStore: cmp.Or(o.MaxStore, DefaultMaxStore),
		// Tool outputs and transcripts travel by reference, but leave room for large plans.
		MaxPayload: 8 << 20,
		NoSigs:     true,
	}
	if o.CredsDir != "" {
		pub, err := auth.Ensure(o.CredsDir)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: %w", err)
		}
		if opts.Nkeys, err = Users(pub, o.Names); err != nil {
			return nil, fmt.Errorf("embedded nats: %w", err)
		}
	}
	if o.TLS.Cert != "" || o.TLS.Key != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: o.TLS.Cert, KeyFile: o.TLS.Key, CaFile: o.TLS.CA, Verify: o.TLS.CA != ""})
		if err != nil {
			return nil, fmt.Errorf("embedded nats: mesh.tls: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, o.TLS.CA != ""
		opts.TLSTimeout = 2
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	s.SetLoggerV2(newServerLog(o.Logger), false, false, false)
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready on %s:%d within 15s (is the port taken? try --listen 127.0.0.1:0)", host, port)
	}
	return &Server{Server: s, dir: dir, opts: opts}, nil
}

// Users renders the permission matrix (pkg/auth) into the server's nkey users: each identity's
// public key with its row of the matrix.
func Users(pub map[auth.Identity]string, n protocol.Names) ([]*server.NkeyUser, error) {
	var out []*server.NkeyUser
	for _, id := range auth.Identities {
		k, ok := pub[id]
		if !ok {
			return nil, fmt.Errorf("no public key for identity %s", id)
		}
		out = append(out, &server.NkeyUser{Nkey: k, Permissions: permissions(auth.For(id, n))})
	}
	return out, nil
}

// permissions is the nats-server form of p.
func permissions(p auth.Perms) *server.Permissions {
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.PubAllow, Deny: p.PubDeny},
		Subscribe: &server.SubjectPermission{Allow: p.SubAllow},
	}
	if p.Responses {
		sp.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: auth.ResponseTTL}
	}
	return sp
}

// restartJetStream stops and starts JetStream in this server, as the server's own configuration
// reload does: every stream and consumer is loaded again from the store, without the write
// errors a full disk left (see StorageWatch). Connections stay up; JetStream requests made
// during the restart fail and are retried by their callers.
func (e *Server) restartJetStream() error {
	if err := e.Server.ShutdownJetStream(); err != nil {
		return fmt.Errorf("stop JetStream: %w", err)
	}
	o := e.opts
	if err := e.Server.EnableJetStream(&server.JetStreamConfig{StoreDir: o.StoreDir, MaxStore: o.JetStreamMaxStore,
		MaxMemory: o.JetStreamMaxMemory, SyncInterval: o.SyncInterval, SyncAlways: o.SyncAlways, Strict: !o.NoJetStreamStrict}); err != nil {
		return fmt.Errorf("start JetStream: %w", err)
	}
	return nil
}

// serverLog passes the server's log lines to a slog logger, so its warnings and errors (a full
// disk, a stream that cannot write) are in the process's log with the roles' lines. Its notices
// (the start-up banner, a line per stream restored) are Debug: the roles say what started.
type serverLog struct {
	l   *slog.Logger
	min slog.Level
}

func newServerLog(l *slog.Logger) serverLog {
	if l == nil {
		return serverLog{l: slog.Default(), min: slog.LevelWarn}
	}
	return serverLog{l: l.With("role", "nats-server"), min: slog.LevelDebug}
}

func (s serverLog) log(level slog.Level, format string, v []any) {
	if level < s.min || !s.l.Enabled(context.Background(), level) {
		return
	}
	s.l.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

func (s serverLog) Noticef(format string, v ...any) { s.log(slog.LevelDebug, format, v) }
func (s serverLog) Warnf(format string, v ...any)   { s.log(slog.LevelWarn, format, v) }
func (s serverLog) Errorf(format string, v ...any)  { s.log(slog.LevelError, format, v) }
func (s serverLog) Fatalf(format string, v ...any)  { s.log(slog.LevelError, format, v) }
func (s serverLog) Debugf(format string, v ...any)  { s.log(slog.LevelDebug, format, v) }
func (s serverLog) Tracef(format string, v ...any)  { s.log(slog.LevelDebug, format, v) }
