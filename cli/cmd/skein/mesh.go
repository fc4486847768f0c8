package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/executor"
	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/miner"
	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/embedders"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/service"
	"github.com/skein-mesh/skein/pkg/tokenize"
	"github.com/skein-mesh/skein/pkg/trace"
	"github.com/skein-mesh/skein/planner"
	"github.com/skein-mesh/skein/toolhost"
)

// multiConfig are the commands that serve several agents, one --config each.
var multiConfig = map[string]bool{"skein run": true, "skein up": true}

// loadConfig honours --config (default ./agent.yaml if present, else defaults): the first one
// for run and up, the only one elsewhere.
func loadConfig(cmd *cobra.Command) (*config.Config, error) {
	paths, _ := cmd.Flags().GetStringArray("config")
	if len(paths) > 1 && !multiConfig[cmd.CommandPath()] {
		return nil, fmt.Errorf("%s takes one --config; only skein run and skein up serve several agents", cmd.CommandPath())
	}
	if len(paths) == 0 {
		return service.LoadConfig("")
	}
	return service.LoadConfig(paths[0])
}

// agentConfigs loads every --config after the first: the other agents an embedded mesh serves.
// Each names a different agent.
func agentConfigs(cmd *cobra.Command, first *config.Config) ([]*config.Config, error) {
	paths, _ := cmd.Flags().GetStringArray("config")
	if len(paths) < 2 {
		return nil, nil
	}
	seen := map[string]string{first.Agent.Name: paths[0]}
	var out []*config.Config
	for _, p := range paths[1:] {
		cfg, err := service.LoadConfig(p)
		if err != nil {
			return nil, err
		}
		if other, dup := seen[cfg.Agent.Name]; dup {
			return nil, fmt.Errorf("%s and %s both declare agent %q; one agent per --config", other, p, cfg.Agent.Name)
		}
		seen[cfg.Agent.Name] = p
		out = append(out, cfg)
	}
	return out, nil
}

// checkKeys fails fast, before anything starts, when a model key any in-process role needs is
// missing (roles nil: every role).
func checkKeys(cfg *config.Config, roles roleSet) error {
	for _, role := range []string{protocol.RoleExecutor, protocol.RolePlanner, protocol.RoleMiner, "memoryd"} {
		if !roles.has(role) {
			continue
		}
		if err := service.CheckKeys(role, cfg); err != nil {
			return configError(err)
		}
	}
	return nil
}

// embeddedMesh is the roles of the mesh running in this process: on an in-process server, or
// (remote set) joined to a mesh whose server runs elsewhere.
type embeddedMesh struct {
	server *embedded.Server // nil when remote
	remote *remoteMesh
	mirror *trace.Mirror
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*bus.Conn
	lock   *homeLock
	home   string
	tls    config.TLS
	// emb is the embedder loaded while the server starts (nil when memory is off).
	emb *preload
	// memoryOn says whether memoryd serves this mesh: memory is enabled and memoryd started
	// (it is off when its models are missing or it failed, whatever the config says).
	memoryOn bool
	// admin provisions the mesh and asks memoryd what it holds (memoryd's own identity may
	// serve memory subjects but not call them); nil when remote.
	admin *bus.Conn
	// strict makes a role that cannot start an error (roles chosen by name), where the
	// embedded default runs on without it and says so.
	strict bool
	// down receives the first role that cannot serve any more: its connection closed for good
	// (see bus.Conn.Lost), or a role that must run stopped with an error. `skein up` then stops
	// the mesh rather than run half dead, as a role binary exits.
	down chan roleDown
}

// roleDown is a role that stopped serving, and why.
type roleDown struct {
	role string
	err  error
	// connLost says the NATS server closed the role's connection; else the role itself stopped.
	connLost bool
}

// setDown reports d unless a role is already reported: one is enough to stop the mesh.
func (m *embeddedMesh) setDown(d roleDown) {
	select {
	case m.down <- d:
	default:
	}
}

// remoteMesh is a mesh this process joins: each role connects over the network as its own
// identity, with credentials found as a role binary finds them.
type remoteMesh struct {
	url, credsFlag string
	cfg            *config.Config
	log            *slog.Logger
}

// identityOf maps the in-process services' connection names to the identity each connects as.
var identityOf = map[string]auth.Identity{"mirror-wait": auth.Gateway}

// preload opens the embedder in the background once begin is called; emb and err are set
// before done closes.
type preload struct {
	once  sync.Once
	open  func() (embed.Embedder, error)
	done  chan struct{}
	emb   embed.Embedder
	err   error
	began atomic.Bool
}

func newPreload(ctx context.Context, m config.Memory) *preload {
	return &preload{done: make(chan struct{}), open: func() (embed.Embedder, error) { return embedders.Open(ctx, m) }}
}

// begin starts loading (once).
func (p *preload) begin() {
	p.once.Do(func() {
		p.began.Store(true)
		labeled("memoryd", func() {
			go func() {
				defer close(p.done)
				p.emb, p.err = p.open()
			}()
		})
	})
}

func (p *preload) wait() (embed.Embedder, error) {
	p.begin()
	<-p.done
	return p.emb, p.err
}

// lazyEmbedder lets memoryd serve before MiniLM is loaded: its id and dimension are known up
// front, and the model loads when something must be embedded (the mesh also starts the load as
// soon as memoryd reports a non-empty memory, so retrieval rarely waits). A fresh project's
// first run, whose retrievals meet an empty memory, never loads it.
type lazyEmbedder struct{ p *preload }

func (l lazyEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	l.p.begin()
	select {
	case <-l.p.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("embedding model still loading: %w", ctx.Err())
	}
	if l.p.err != nil {
		return nil, l.p.err
	}
	return l.p.emb.Embed(ctx, texts)
}
func (l lazyEmbedder) Dim() int      { return minilm.Dim }
func (l lazyEmbedder) Model() string { return minilm.ModelID }
func (l lazyEmbedder) Close() error  { return nil } // the mesh closes the real one in stop

// startServer starts the embedded NATS server with the mesh provisioned and its store watched
// (embedded.StorageWatch), and no services. The server's own warnings and errors go to log.
func startServer(ctx context.Context, cfg *config.Config, home, listen string, log *slog.Logger) (*embeddedMesh, error) {
	lock, err := lockHome(home)
	if err != nil {
		return nil, err
	}
	t := cfg.Mesh.TLS
	var srv *embedded.Server
	labeled("nats-server", func() {
		srv, err = embedded.Start(embedded.Options{StoreDir: storeDir(home), Listen: listen,
			CredsDir: auth.Dir(home), Names: protocol.NewNames(cfg.Mesh.Namespace), TLS: bus.TLSFiles{CA: t.CA, Cert: t.Cert, Key: t.Key},
			Logger: log})
	})
	if err != nil {
		lock.release()
		return nil, err
	}
	lock.setURL(srv.URL())
	m := &embeddedMesh{server: srv, mirror: &trace.Mirror{}, lock: lock, home: home, tls: t, down: make(chan roleDown, 1)}
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c, err := m.conn(string(auth.Admin))
	if err != nil {
		m.stop()
		return nil, err
	}
	names := protocol.NewNames(cfg.Mesh.Namespace)
	if err := bus.Provision(m.ctx, c.JS, names, service.Limits(cfg)); err != nil {
		m.stop()
		return nil, err
	}
	m.admin = c
	if _, err := srv.WatchStorage(m.ctx, c.NC, names, embedded.StorageOptions{Reserve: cfg.Mesh.StorageReserve, Logger: log.With("role", "storage")}); err != nil {
		m.stop()
		return nil, err
	}
	return m, nil
}

// labeled runs fn with the pprof label role=role: goroutines fn starts (a connection's reader,
// a service's handlers) inherit it, so a CPU profile of the one process splits by role.
func labeled(role string, fn func()) {
	pprof.Do(context.Background(), pprof.Labels("role", role), func(context.Context) { fn() })
}

// conn connects one in-process service (or the CLI) to the embedded server as its own identity,
// with the credentials the server wrote under the home.
func (m *embeddedMesh) conn(role string) (*bus.Conn, error) {
	id, ok := identityOf[role]
	if !ok {
		id = auth.Identity(role)
	}
	var c *bus.Conn
	var err error
	if m.remote != nil {
		c, err = m.dialRemote(role, id)
	} else {
		c, err = m.dialLocal(role, id)
	}
	if err == nil {
		go func() {
			select {
			case <-c.Lost():
				m.setDown(roleDown{role: role, err: c.LostErr(), connLost: true})
			case <-m.ctx.Done():
			}
		}()
	}
	return c, err
}

// dialLocal connects a role to the server in this process, with the credentials it wrote under
// the home.
func (m *embeddedMesh) dialLocal(role string, id auth.Identity) (*bus.Conn, error) {
	var c *bus.Conn
	var err error
	labeled(role, func() {
		c, err = bus.Connect(m.ctx, m.server.URL(), "skein-"+role, 10*time.Second,
			bus.WithCreds(auth.File(auth.Dir(m.home), id)), bus.WithInProcess(inProcess{m.server}),
			// for its object stores, which go over the socket (bus.Conn.ObjectStores)
			bus.WithTLS(bus.TLSFiles{CA: m.tls.CA, Cert: m.tls.Cert, Key: m.tls.Key}))
	})
	if err == nil {
		m.conns = append(m.conns, c)
	}
	return c, err
}

// dialRemote connects a role to the mesh this process joined, and waits until the streams and
// buckets it uses exist (a gateway creates what is missing; see service.Prepare).
func (m *embeddedMesh) dialRemote(role string, id auth.Identity) (*bus.Conn, error) {
	r := m.remote
	var c *bus.Conn
	var err error
	labeled(role, func() {
		c, err = bus.Connect(m.ctx, r.url, "skein-"+role, 30*time.Second, service.ConnectOptions(id, r.credsFlag, r.cfg)...)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", role, err)
	}
	m.conns = append(m.conns, c)
	if err := service.Prepare(m.ctx, id, c, protocol.NewNames(r.cfg.Mesh.Namespace), r.cfg, r.log.With("role", role)); err != nil {
		return nil, fmt.Errorf("%s: %w", role, err)
	}
	return c, nil
}

// inProcess hands the services in this process memory connections to the embedded server,
// which skip the loopback socket's system calls and wake-ups on every message. The server's
// goroutines for them carry the nats-server label, as those of socket connections do.
type inProcess struct{ e *embedded.Server }

func (p inProcess) InProcessConn() (c net.Conn, err error) {
	labeled("nats-server", func() { c, err = p.e.Server.InProcessConn() })
	return c, err
}

// startEmbedded starts a NATS server with JetStream files under home and every service: the
// mesh's roles with cfg, and an executor (and a toolhost, for its tools and the agents it calls)
// for cfg's agent and for each agent in others.
func startEmbedded(ctx context.Context, cfg *config.Config, others []*config.Config, home, listen string, log *slog.Logger, httpAddr string) (*embeddedMesh, error) {
	return startMesh(ctx, cfg, others, meshOptions{home: home, listen: listen, httpAddr: httpAddr}, log)
}

// meshOptions say where the roles of startMesh run and which.
type meshOptions struct {
	home, listen, httpAddr string
	// roles are the roles to run; nil runs every one, and a role that cannot start (memoryd
	// without its models) is left out with a warning instead of stopping the mesh.
	roles roleSet
	// natsURL, when set, is a mesh to join instead of starting a server here; each role
	// connects as its own identity (credsFlag: the one file of a single role).
	natsURL, credsFlag string
}

// startMesh runs the chosen roles: on a NATS server it starts in this process (JetStream files
// under o.home, listening on o.listen), or joined to the mesh at o.natsURL. The executors (and
// toolhosts, for their tools and the agents they call) serve cfg's agent and each agent in others.
func startMesh(ctx context.Context, cfg *config.Config, others []*config.Config, o meshOptions, log *slog.Logger) (*embeddedMesh, error) {
	roles := o.roles
	// The slow loads (the tokenizer's vocabulary, which the first model turn needs, and the
	// embedding model when memory is on) run while the server starts and the mesh provisions,
	// instead of one after the other on the first session's path.
	if roles.has(protocol.RoleExecutor) || roles.has(protocol.RolePlanner) {
		go tokenize.Count("warm up")
	}
	var emb *preload
	if (cfg.Memory.Enabled || cfg.Tools.Retrieval.Enabled) && roles.has("memoryd") {
		emb = newPreload(context.WithoutCancel(ctx), cfg.Memory)
		if e := cfg.Memory.Embedder; e != "" && e != "minilm" {
			emb.begin() // an HTTP embedder is cheap to open, and memoryd needs it at once
		}
	}
	var m *embeddedMesh
	var err error
	if o.natsURL != "" {
		m = &embeddedMesh{mirror: &trace.Mirror{}, home: o.home, tls: cfg.Mesh.TLS, down: make(chan roleDown, 1),
			remote: &remoteMesh{url: o.natsURL, credsFlag: o.credsFlag, cfg: cfg, log: log}}
		m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
		// A role joining a mesh may wait minutes for its streams (service.Prepare): a signal
		// while it waits ends the wait.
		context.AfterFunc(ctx, m.cancel)
	} else {
		m, err = startServer(ctx, cfg, o.home, o.listen, log)
	}
	if err != nil {
		if emb != nil && emb.began.Load() {
			if e, _ := emb.wait(); e != nil {
				_ = e.Close()
			}
		}
		return nil, err
	}
	m.emb, m.strict = emb, roles != nil
	if err := m.startRoles(cfg, others, o, log); err != nil {
		m.stop()
		return nil, err
	}
	return m, nil
}

func (m *embeddedMesh) startRoles(cfg *config.Config, others []*config.Config, o meshOptions, log *slog.Logger) error {
	roles, home := o.roles, o.home
	names := protocol.NewNames(cfg.Mesh.Namespace)
	sctx := m.ctx
	var gatewayConn *bus.Conn
	if m.remote != nil && roles.has("gateway") {
		// On a mesh of its own NATS servers the gateway creates the streams and buckets the
		// other roles wait for: it connects first, so those in this process do not wait on it.
		c, err := m.conn("gateway")
		if err != nil {
			return err
		}
		gatewayConn = c
	}
	run := func(role string, optional bool, fn func(context.Context, *bus.Conn, *slog.Logger) error) error {
		c := gatewayConn
		if role != "gateway" || c == nil {
			var err error
			if c, err = m.conn(role); err != nil {
				return err
			}
		}
		l := log.With("role", role)
		m.wg.Add(1)
		labeled(role, func() {
			go func() {
				defer m.wg.Done()
				if err := fn(sctx, c, l); err != nil && !errors.Is(err, context.Canceled) {
					if optional {
						l.Warn("service unavailable; the mesh runs without it", "err", err)
					} else {
						l.Error("service stopped", "err", err)
						m.setDown(roleDown{role: role, err: err})
					}
				}
			}()
		})
		return nil
	}
	// The toolhosts publish the catalog and the executors register their agents before anything
	// can submit, so a bad manifest stops the mesh at once and no task meets a half-started mesh.
	agents := append([]*config.Config{cfg}, others...)
	if roles.has("toolhost") {
		for i, a := range agents {
			if i > 0 && len(a.Tools.ManifestDirs) == 0 && len(a.Tools.Agents) == 0 {
				continue
			}
			if err := m.startToolhost(sctx, a, names, home, log); err != nil {
				return err
			}
		}
	}
	if roles.has("memoryd") {
		on, err := m.startMemoryd(cfg, names, home, log)
		switch {
		case err != nil && m.strict:
			return protocol.Errorf(protocol.CodeUnavailable, "memoryd: %v", err)
		case err != nil:
			log.Warn("memory is off for this mesh", "role", "memoryd", "err", err)
		}
		if !on {
			cfg = memoryOff(cfg)
		}
		m.memoryOn = on
	}
	if roles.has(protocol.RoleExecutor) {
		for i, a := range agents {
			if i == 0 {
				a = cfg
			} else if !cfg.Memory.Enabled {
				a = memoryOff(a) // no memoryd serves this mesh
			}
			if err := m.startExecutor(sctx, a, names, home, log); err != nil {
				return err
			}
		}
	}
	services := []struct {
		role     string
		optional bool
		fn       func(context.Context, *bus.Conn, *slog.Logger) error
	}{
		{"gateway", false, func(ctx context.Context, c *bus.Conn, l *slog.Logger) error {
			return gateway.Run(ctx, gateway.Deps{Conn: c, Names: names, Config: cfg, Logger: l, Home: home, HTTPAddr: o.httpAddr, Mirror: m.mirror})
		}},
		{"planner", false, func(ctx context.Context, c *bus.Conn, l *slog.Logger) error {
			return planner.Run(ctx, planner.Deps{Conn: c, Names: names, Config: cfg, Logger: l, Home: home})
		}},
		{"miner", !m.strict, func(ctx context.Context, c *bus.Conn, l *slog.Logger) error {
			return miner.Run(ctx, miner.Deps{Conn: c, Names: names, Config: cfg, Logger: l, Home: home})
		}},
	}
	for _, s := range services {
		if !roles.has(s.role) {
			continue
		}
		if err := run(s.role, s.optional, s.fn); err != nil {
			return err
		}
	}
	return nil
}

// startToolhost serves the tools of one agent's config and the agents it calls.
func (m *embeddedMesh) startToolhost(ctx context.Context, cfg *config.Config, names protocol.Names, home string, log *slog.Logger) error {
	tc, err := m.conn("toolhost")
	if err != nil {
		return err
	}
	var th *toolhost.Host
	labeled("toolhost", func() {
		th, err = toolhost.New(ctx, toolhost.Deps{Conn: tc, Names: names, Config: cfg, Logger: log.With("role", "toolhost", "agent", cfg.Agent.Name), Home: home})
	})
	if err != nil {
		return fmt.Errorf("toolhost of agent %s: %w", cfg.Agent.Name, err)
	}
	m.wg.Add(1)
	labeled("toolhost", func() { go func() { defer m.wg.Done(); _ = th.Serve(ctx) }() })
	return nil
}

// startExecutor runs the steps of one agent.
func (m *embeddedMesh) startExecutor(ctx context.Context, cfg *config.Config, names protocol.Names, home string, log *slog.Logger) error {
	ec, err := m.conn("executor")
	if err != nil {
		return err
	}
	var ex *executor.Executor
	labeled("executor", func() {
		ex, err = executor.New(ctx, executor.Deps{Conn: ec, Names: names, Config: cfg, Logger: log.With("role", "executor", "agent", cfg.Agent.Name), Home: home})
	})
	if err != nil {
		return fmt.Errorf("executor of agent %s: %w", cfg.Agent.Name, err)
	}
	m.wg.Add(1)
	labeled("executor", func() { go func() { defer m.wg.Done(); _ = ex.Serve(ctx) }() })
	return nil
}

// startMemoryd starts memoryd and waits until it serves. It reports whether memory is on for
// the mesh, and why memoryd did not start when it did not (no embedder installed, say): the
// embedded default then runs with memory off, said once, rather than every step waiting for a
// memoryd that will never answer.
func (m *embeddedMesh) startMemoryd(cfg *config.Config, names protocol.Names, home string, log *slog.Logger) (bool, error) {
	// Tool retrieval embeds with memoryd's model, so memoryd runs when either needs it.
	if !cfg.Memory.Enabled && !cfg.Tools.Retrieval.Enabled {
		return false, nil
	}
	l := log.With("role", "memoryd")
	var emb embed.Embedder = lazyEmbedder{m.emb}
	if e := cfg.Memory.Embedder; e == "" || e == "minilm" {
		// The model loads lazily; whether it can load at all is known now, and said now.
		if err := minilm.Check(minilm.Options{ModelDir: os.Getenv(minilm.EnvModelDir), LibPath: os.Getenv(minilm.EnvORTLib)}); err != nil {
			return false, err
		}
	} else {
		// An HTTP embedder's id and size are only known once it is open.
		var err error
		if emb, err = m.emb.wait(); err != nil {
			return false, fmt.Errorf("memoryd could not start: %w", err)
		}
	}
	c, err := m.conn("memoryd")
	if err != nil {
		return false, err
	}
	ready := make(chan struct{})
	failed := make(chan error, 1)
	m.wg.Add(1)
	labeled("memoryd", func() { go m.runMemoryd(cfg, names, home, c, emb, l, ready, failed) })
	select {
	case <-ready:
		if _, lazy := emb.(lazyEmbedder); lazy {
			if m.admin != nil {
				go m.loadIfRemembered(m.admin, names, l)
			} else {
				// A memoryd of its own (skein up --roles memoryd) serves a shared memory that
				// is rarely empty: load the model now, as the memoryd binary does.
				m.emb.begin()
			}
		}
		return cfg.Memory.Enabled, nil
	case err := <-failed:
		return false, fmt.Errorf("memoryd could not start: %w", err)
	case <-time.After(2 * time.Minute):
		return false, errors.New("memoryd did not start within 2 minutes")
	}
}

func (m *embeddedMesh) runMemoryd(cfg *config.Config, names protocol.Names, home string, c *bus.Conn, emb embed.Embedder, l *slog.Logger, ready chan struct{}, failed chan error) {
	defer m.wg.Done()
	if err := memoryd.Run(m.ctx, memoryd.Deps{Conn: c, Names: names, Config: cfg, Logger: l, Home: home, Ready: ready, Embedder: emb}); err != nil && !errors.Is(err, context.Canceled) {
		failed <- err
	}
}

// loadIfRemembered starts loading the embedding model at once when memory already holds
// guidelines (the first retrieval will need it), and says once, clearly, if it cannot load.
func (m *embeddedMesh) loadIfRemembered(c *bus.Conn, names protocol.Names, l *slog.Logger) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	var rep protocol.MemoryHealthReply
	if err := bus.Request(ctx, c.NC, names.Memory(protocol.MemHealth), &protocol.MemoryHealthRequest{}, &rep, 5*time.Second); err != nil || rep.Entries == 0 {
		return
	}
	if _, err := m.emb.wait(); err != nil {
		l.Warn("memory cannot embed: guidelines are neither retrieved nor learned until this is fixed", "err", err)
	}
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
	if m.emb != nil && m.emb.began.Load() {
		// memoryd closes only what it opened itself; the preloaded embedder is the mesh's.
		if e, _ := m.emb.wait(); e != nil {
			_ = e.Close()
		}
	}
	if m.server != nil {
		m.server.Shutdown()
	}
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

// dialMeshFull is how run and chat reach a mesh: --nats / $SKEIN_NATS_URL / mesh.nats_url, else
// an embedded mesh with every service under $SKEIN_HOME, which keeps its state there for the
// next command. Call the returned stop func when done.
func dialMeshFull(cmd *cobra.Command, cfg *config.Config) (*bus.Conn, protocol.Names, *embeddedMesh, func(), error) {
	ctx := cmdContext(cmd)
	names := protocol.NewNames(cfg.Mesh.Namespace)
	flagURL, _ := cmd.Flags().GetString("nats")
	if url := service.NATSURL(flagURL, cfg); url != "" {
		if paths, _ := cmd.Flags().GetStringArray("config"); len(paths) > 1 {
			return nil, names, nil, nil, usageError(cmd, errors.New("several --config serve their agents in an embedded mesh; with --nats, start an executor (and a toolhost) per agent instead"))
		}
		c, err := dialURL(cmd, cfg, url)
		if err != nil {
			return nil, names, nil, nil, err
		}
		return c, names, nil, c.Close, nil
	}
	others, err := agentConfigs(cmd, cfg)
	if err != nil {
		return nil, names, nil, nil, configError(err)
	}
	mesh, err := startEmbedded(ctx, cfg, others, service.Home(), "127.0.0.1:0", meshLogger(), "")
	if err != nil {
		return nil, names, nil, nil, err
	}
	c, err := mesh.conn(string(cliIdentity(cmd)))
	if err != nil {
		mesh.stop()
		return nil, names, nil, nil, err
	}
	return c, names, mesh, func() { c.Close(); mesh.stop() }, nil
}

// dialExisting is how every other command reaches a mesh, which must exist already: the URL
// given, else the mesh running on $SKEIN_HOME (its lock file says where it listens), else the
// state that embedded runs left under $SKEIN_HOME, opened in this process with the roles the
// command needs (none, or memoryd). It never starts a mesh from nothing: reading an empty one
// would answer "no sessions" and leave a .skein folder wherever the command ran.
func dialExisting(cmd *cobra.Command, cfg *config.Config, roles roleSet) (*bus.Conn, protocol.Names, func(), error) {
	names := protocol.NewNames(cfg.Mesh.Namespace)
	flagURL, _ := cmd.Flags().GetString("nats")
	url := service.NATSURL(flagURL, cfg)
	home := service.Home()
	if url == "" {
		if at, running := runningMesh(home); running {
			if at == "" {
				return nil, names, nil, fail(protocol.ExitTempFail, "a mesh is starting on %s; try again in a moment", home)
			}
			url = at
		}
	}
	if url != "" {
		c, err := dialURL(cmd, cfg, url)
		if err != nil {
			return nil, names, nil, err
		}
		return c, names, c.Close, nil
	}
	if !hasMeshState(home) {
		return nil, names, nil, noMesh(home)
	}
	mesh, err := startMesh(cmdContext(cmd), cfg, nil, meshOptions{home: home, listen: "127.0.0.1:0", roles: roles}, meshLogger())
	if err != nil {
		return nil, names, nil, err
	}
	c, err := mesh.conn(string(cliIdentity(cmd)))
	if err != nil {
		mesh.stop()
		return nil, names, nil, err
	}
	return c, names, func() { c.Close(); mesh.stop() }, nil
}

// dialURL connects the CLI to the mesh at url as its identity (client, or admin for the
// commands that change memory or the streams).
func dialURL(cmd *cobra.Command, cfg *config.Config, url string) (*bus.Conn, error) {
	credsFlag, _ := cmd.Flags().GetString("creds")
	return bus.Connect(cmdContext(cmd), url, "skein-cli", 5*time.Second, service.ConnectOptions(cliIdentity(cmd), credsFlag, cfg)...)
}

// noMesh says there is no mesh to work on, and how to get one.
func noMesh(home string) error {
	where := home
	if abs, err := filepath.Abs(home); err == nil && abs != home {
		where = fmt.Sprintf("%s (%s)", home, abs)
	}
	return fail(protocol.ExitUnavailable, "no mesh here: none is running on SKEIN_HOME=%s and it holds no mesh state.\n"+
		"  start one with `skein up` (or run a task with `skein run`, which keeps its state there),\n"+
		"  or point at one with --nats URL or SKEIN_NATS_URL, or set SKEIN_HOME to the folder a mesh runs on", where)
}

func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// adminCommands change memory itself or the streams' settings, which only the admin identity
// may; every other command connects as client.
var adminCommands = map[string]bool{
	"skein memory import": true, "skein memory evict": true, "skein memory migrate": true,
	"skein ingest-traces": true, "skein replay": true, "skein mesh apply": true,
}

func cliIdentity(cmd *cobra.Command) auth.Identity {
	if adminCommands[cmd.CommandPath()] {
		return auth.Admin
	}
	return auth.Client
}
