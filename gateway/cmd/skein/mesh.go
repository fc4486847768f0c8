package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/executor"
	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/miner"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/service"
	"github.com/skein-mesh/skein/pkg/trace"
	"github.com/skein-mesh/skein/planner"
	"github.com/skein-mesh/skein/toolhost"
)

// loadConfig honours --config (default ./agent.yaml if present, else defaults).
func loadConfig(cmd *cobra.Command) (*config.Config, error) {
	path, _ := cmd.Flags().GetString("config")
	return service.LoadConfig(path)
}

// checkKeys fails fast, before anything starts, when a model key any in-process role needs is missing.
func checkKeys(cfg *config.Config) error {
	for _, role := range []string{protocol.RoleExecutor, protocol.RolePlanner, protocol.RoleMiner, "memoryd"} {
		if err := service.CheckKeys(role, cfg); err != nil {
			return &exitError{code: 2, msg: err.Error()}
		}
	}
	return nil
}

// embeddedMesh is every service of the mesh running in this process on an in-process server.
type embeddedMesh struct {
	server *bus.Embedded
	mirror *trace.Mirror
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*bus.Conn
	lock   *homeLock
}

// startServer starts the embedded NATS server with the mesh provisioned, and no services.
func startServer(ctx context.Context, cfg *config.Config, home, listen string) (*embeddedMesh, error) {
	lock, err := lockHome(home)
	if err != nil {
		return nil, err
	}
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(home, "nats"), Listen: listen})
	if err != nil {
		lock.release()
		return nil, err
	}
	lock.setURL(srv.URL())
	m := &embeddedMesh{server: srv, mirror: &trace.Mirror{}, lock: lock}
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c, err := m.conn("provision")
	if err != nil {
		m.stop()
		return nil, err
	}
	if err := bus.Provision(m.ctx, c.JS, protocol.NewNames(cfg.Mesh.Namespace), service.Limits(cfg)); err != nil {
		m.stop()
		return nil, err
	}
	return m, nil
}

func (m *embeddedMesh) conn(role string) (*bus.Conn, error) {
	c, err := bus.Connect(m.ctx, m.server.URL(), "skein-"+role, 10*time.Second)
	if err == nil {
		m.conns = append(m.conns, c)
	}
	return c, err
}

// startEmbedded starts a NATS server with JetStream files under home and every service.
func startEmbedded(ctx context.Context, cfg *config.Config, home, listen string, log *slog.Logger, httpAddr string) (*embeddedMesh, error) {
	m, err := startServer(ctx, cfg, home, listen)
	if err != nil {
		return nil, err
	}
	names := protocol.NewNames(cfg.Mesh.Namespace)
	sctx, conn := m.ctx, m.conn
	run := func(role string, optional bool, fn func(context.Context, *bus.Conn, *slog.Logger) error) error {
		c, err := conn(role)
		if err != nil {
			return err
		}
		l := log.With("role", role)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if err := fn(sctx, c, l); err != nil && !errors.Is(err, context.Canceled) {
				if optional {
					l.Warn("service unavailable; the mesh runs without it", "err", err)
				} else {
					l.Error("service stopped", "err", err)
				}
			}
		}()
		return nil
	}
	// The toolhost publishes the catalog and the executor registers its agent before anything can
	// submit, so a bad manifest stops the mesh at once and no task meets a half-started mesh.
	tc, err := conn("toolhost")
	if err != nil {
		m.stop()
		return nil, err
	}
	th, err := toolhost.New(sctx, toolhost.Deps{Conn: tc, Names: names, Config: cfg, Logger: log.With("role", "toolhost"), Home: home})
	if err != nil {
		m.stop()
		return nil, err
	}
	m.wg.Add(1)
	go func() { defer m.wg.Done(); _ = th.Serve(sctx) }()
	cfg = m.startMemoryd(cfg, names, home, log)
	ec, err := conn("executor")
	if err != nil {
		m.stop()
		return nil, err
	}
	ex, err := executor.New(sctx, executor.Deps{Conn: ec, Names: names, Config: cfg, Logger: log.With("role", "executor"), Home: home})
	if err != nil {
		m.stop()
		return nil, err
	}
	m.wg.Add(1)
	go func() { defer m.wg.Done(); _ = ex.Serve(sctx) }()
	services := []struct {
		role     string
		optional bool
		fn       func(context.Context, *bus.Conn, *slog.Logger) error
	}{
		{"gateway", false, func(ctx context.Context, c *bus.Conn, l *slog.Logger) error {
			return gateway.Run(ctx, gateway.Deps{Conn: c, Names: names, Config: cfg, Logger: l, Home: home, HTTPAddr: httpAddr, Mirror: m.mirror})
		}},
		{"planner", false, func(ctx context.Context, c *bus.Conn, l *slog.Logger) error {
			return planner.Run(ctx, planner.Deps{Conn: c, Names: names, Config: cfg, Logger: l, Home: home})
		}},
		{"miner", true, func(ctx context.Context, c *bus.Conn, l *slog.Logger) error {
			return miner.Run(ctx, miner.Deps{Conn: c, Names: names, Config: cfg, Logger: l, Home: home})
		}},
	}
	for _, s := range services {
		if err := run(s.role, s.optional, s.fn); err != nil {
			m.stop()
			return nil, err
		}
	}
	return m, nil
}

// startMemoryd starts memoryd and waits until it serves. Memory is optional in one process: when
// memoryd cannot start (no embedder installed, say) the mesh runs with memory off, said once,
// rather than every step waiting for a memoryd that will never answer. It returns the config the
// other services should use.
func (m *embeddedMesh) startMemoryd(cfg *config.Config, names protocol.Names, home string, log *slog.Logger) *config.Config {
	// Tool retrieval embeds with memoryd's model, so memoryd runs when either needs it.
	if !cfg.Memory.Enabled && !cfg.Tools.Retrieval.Enabled {
		return cfg
	}
	l := log.With("role", "memoryd")
	c, err := m.conn("memoryd")
	if err != nil {
		l.Warn("memory is off for this mesh", "err", err)
		return memoryOff(cfg)
	}
	ready := make(chan struct{})
	failed := make(chan error, 1)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := memoryd.Run(m.ctx, memoryd.Deps{Conn: c, Names: names, Config: cfg, Logger: l, Home: home, Ready: ready}); err != nil && !errors.Is(err, context.Canceled) {
			failed <- err
		}
	}()
	select {
	case <-ready:
		return cfg
	case err := <-failed:
		l.Warn("memory is off for this mesh: memoryd could not start", "err", err)
	case <-time.After(2 * time.Minute):
		l.Warn("memory is off for this mesh: memoryd did not start within 2 minutes")
	}
	return memoryOff(cfg)
}

func memoryOff(cfg *config.Config) *config.Config {
	c := *cfg
	c.Memory.Enabled = false
	return &c
}

func (m *embeddedMesh) stop() {
	if m.cancel != nil {
		m.cancel()
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	for _, c := range m.conns {
		c.Close()
	}
	m.server.Shutdown()
	m.lock.release()
}

// meshLogger keeps the embedded services quiet unless SKEIN_LOG asks otherwise: a run's own
// output is the trace.
func meshLogger() *slog.Logger {
	level := slog.LevelWarn
	switch os.Getenv("SKEIN_LOG") {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// dialMesh honours --nats / $SKEIN_NATS_URL / mesh.nats_url; with none it starts an embedded mesh
// with every service under $SKEIN_HOME. Call the returned stop func when done.
func dialMesh(cmd *cobra.Command, cfg *config.Config) (*bus.Conn, protocol.Names, func(), error) {
	c, names, _, stop, err := dialMeshFull(cmd, cfg, true)
	return c, names, stop, err
}

func dialMeshFull(cmd *cobra.Command, cfg *config.Config, services bool) (*bus.Conn, protocol.Names, *embeddedMesh, func(), error) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	names := protocol.NewNames(cfg.Mesh.Namespace)
	flagURL, _ := cmd.Flags().GetString("nats")
	if url := service.NATSURL(flagURL, cfg); url != "" {
		c, err := bus.Connect(ctx, url, "skein-cli", 5*time.Second)
		if err != nil {
			return nil, names, nil, nil, err
		}
		return c, names, nil, c.Close, nil
	}
	var mesh *embeddedMesh
	var err error
	if services {
		mesh, err = startEmbedded(ctx, cfg, service.Home(), "127.0.0.1:0", meshLogger(), "")
	} else {
		mesh, err = startServer(ctx, cfg, service.Home(), "127.0.0.1:0")
	}
	if err != nil {
		return nil, names, nil, nil, err
	}
	c, err := bus.Connect(ctx, mesh.server.URL(), "skein-cli", 5*time.Second)
	if err != nil {
		mesh.stop()
		return nil, names, nil, nil, err
	}
	return c, names, mesh, func() { c.Close(); mesh.stop() }, nil
}
