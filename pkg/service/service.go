// Package service is the shared start-up of every role binary: flags, config, logging, signal
// handling, the NATS connection and provisioning, so each cmd/<role>/main.go is a few lines.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
	"github.com/skein-mesh/skein/pkg/usage"
)

// Deps is what a role's main receives.
type Deps struct {
	Ctx    context.Context
	Conn   *bus.Conn
	Names  protocol.Names
	Config *config.Config
	Logger *slog.Logger
	Home   string
	// Ready is for the role to close once it takes work (its consumers or endpoints in place):
	// the health listener (--health) reports ready from then on.
	Ready chan<- struct{}
}

// Home returns $SKEIN_HOME, or ./.skein.
func Home() string {
	if h := os.Getenv("SKEIN_HOME"); h != "" {
		return h
	}
	return ".skein"
}

// NATSURL returns the URL from flag, then $SKEIN_NATS_URL, then the config file, then "".
func NATSURL(flagValue string, cfg *config.Config) string {
	if flagValue != "" {
		return flagValue
	}
	if u := os.Getenv("SKEIN_NATS_URL"); u != "" {
		return u
	}
	if cfg != nil {
		return cfg.Mesh.NATSURL
	}
	return ""
}

// LoadConfig reads path, or ./agent.yaml when path is "" and that file exists, or the defaults.
func LoadConfig(path string) (*config.Config, error) {
	if path == "" {
		if _, err := os.Stat("agent.yaml"); err == nil {
			path = "agent.yaml"
		} else {
			cfg := config.Default()
			MaskConfiguredSecrets(cfg)
			return cfg, nil
		}
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	// The file's models: entries join the model table (prices and limits) for this process.
	if err := usage.Apply(cfg.Models); err != nil {
		return nil, fmt.Errorf("%s: models: %w", path, err)
	}
	MaskConfiguredSecrets(cfg)
	return cfg, nil
}

// MaskConfiguredSecrets registers the secrets cfg names for redaction in this process: the
// value of every model binding's key variable (llm, planner.llm, executor.llm, miner.llm,
// whatever the variable is called) and gateway.http_token. Redaction by variable name catches
// only names like *KEY* or *TOKEN* ($SKEIN_HTTP_TOKEN, $SKEIN_EMBED_API_KEY), so a key under
// llm.api_key_env: OPENROUTER would otherwise reach traces and logs as it is.
func MaskConfiguredSecrets(cfg *config.Config) {
	envs := []string{core.KeyEnv(cfg.LLM)}
	for _, role := range []string{protocol.RolePlanner, protocol.RoleExecutor, protocol.RoleMiner} {
		envs = append(envs, core.KeyEnv(cfg.ForRole(role)))
	}
	redact.AddEnv(envs...)
	redact.AddValues(cfg.Gateway.HTTPToken)
}

// Logger returns a text logger on stderr; SKEIN_LOG=debug raises the level.
func Logger(role string) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("SKEIN_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: redactAttr})).With("role", role)
}

// redactAttr keeps credentials out of log lines: every string and error value is redacted.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); s != "" {
			a.Value = slog.StringValue(redact.String(s))
		}
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case error:
			a.Value = slog.StringValue(redact.String(v.Error()))
		case fmt.Stringer:
			a.Value = slog.StringValue(redact.String(v.String()))
		case []string:
			out := make([]string, len(v))
			for i, s := range v {
				out[i] = redact.String(s)
			}
			a.Value = slog.AnyValue(out)
		}
	}
	return a
}

// Main parses the standard flags (--nats, --config), connects, provisions and runs fn until a
// signal arrives. It returns the process exit code. Roles may define extra flags before calling.
func Main(role string, fn func(Deps) error) int {
	natsURL := flag.String("nats", "", "NATS server URL (default $SKEIN_NATS_URL, then "+bus.DefaultURL+")")
	creds := flag.String("creds", "", "NATS credentials file (default $SKEIN_CREDS, mesh.creds_file, then $SKEIN_HOME/creds/"+role+".nk)")
	cfgPath := flag.String("config", "", "agent.yaml (default ./agent.yaml if present)")
	pprofAddr := flag.String("pprof", "", "serve runtime profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6060 (default off)")
	healthAddr := flag.String("health", "", "serve "+HealthLivePath+" and "+HealthReadyPath+" (the NATS connection and whether this role takes work) on this address, e.g. 0.0.0.0:8081 for an orchestrator's probes (default off)")
	flag.Parse()
	log := Logger(role)
	cfg, err := LoadConfig(*cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return protocol.ExitConfig
	}
	if err := CheckKeys(role, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return protocol.ExitConfig
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *pprofAddr != "" {
		if _, err := ServePprof(ctx, *pprofAddr, log); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return protocol.ExitUsage
		}
	}
	// The health listener is up before the connection, so a probe tells "still connecting" from
	// "not running".
	health := NewHealth(role)
	if *healthAddr != "" {
		if _, err := ServeHealth(ctx, *healthAddr, health, log); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return protocol.ExitUsage
		}
	}
	url := NATSURL(*natsURL, cfg)
	if url == "" {
		url = bus.DefaultURL
	}
	conn, err := bus.Connect(ctx, url, "skein-"+role, 30*time.Second, ConnectOptions(auth.Identity(role), *creds, cfg)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		var ae *bus.AuthError
		if errors.As(err, &ae) {
			return protocol.ExitNoPerm
		}
		return protocol.ExitUnavailable
	}
	defer conn.Close()
	health.SetConn(conn.NC)
	names := protocol.NewNames(cfg.Mesh.Namespace)
	if err := Prepare(ctx, auth.Identity(role), conn, names, cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return protocol.ExitUnavailable
	}
	log.Info("started", "nats", redact.URL(url), "namespace", names.NS, "agent", cfg.Agent.Name)
	ready := make(chan struct{})
	go func() {
		select {
		case <-ready:
			health.SetReady()
		case <-ctx.Done():
		}
	}()
	return run(ctx, conn, log, func(ctx context.Context) error {
		return fn(Deps{Ctx: ctx, Conn: conn, Names: names, Config: cfg, Logger: log, Home: Home(), Ready: ready})
	})
}

// run runs a role until it returns or its connection is lost. A role whose connection the server
// closed for good cannot serve and never will: it is stopped (given ShutdownGrace and a little
// more to return) and the process exits with protocol.ExitUnavailable, so its supervisor starts
// it again, rather than staying up half dead.
func run(ctx context.Context, conn *bus.Conn, log *slog.Logger, fn func(context.Context) error) int {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Error("stopped", "err", err)
			return protocol.ExitInternal
		}
		return 0
	case <-conn.Lost():
	}
	log.Error("stopping: the NATS server closed this role's connection and it is not reconnected; exiting so the supervisor restarts the role",
		"err", conn.LostErr(), "exit", protocol.ExitUnavailable)
	stop()
	select {
	case <-done:
	case <-time.After(ShutdownGrace + 2*time.Second):
		log.Warn("the role did not stop in time; exiting anyway")
	}
	return protocol.ExitUnavailable
}

// ConnectOptions are the credentials and TLS identity id connects with: --creds (credsFlag), then
// $SKEIN_CREDS, then mesh.creds_file, then the identity's file under $SKEIN_HOME/creds (where
// `skein up` writes them), and mesh.tls.
func ConnectOptions(id auth.Identity, credsFlag string, cfg *config.Config) []bus.Option {
	src := auth.Source{Flag: credsFlag, Home: Home()}
	var t config.TLS
	if cfg != nil {
		src.Config, t = cfg.Mesh.CredsFile, cfg.Mesh.TLS
	}
	return []bus.Option{bus.WithCreds(auth.Resolve(id, src)), bus.WithIdentity(id), bus.WithTLS(bus.TLSFiles{CA: t.CA, Cert: t.Cert, Key: t.Key})}
}

// Prepare makes sure the streams and buckets id uses exist before it starts: the admin and the
// gateway create what is missing and change nothing (differences are logged; `skein mesh apply` applies them),
// every other role waits for them, because its permissions let it create nothing.
func Prepare(ctx context.Context, id auth.Identity, conn *bus.Conn, names protocol.Names, cfg *config.Config, log *slog.Logger) error {
	switch id {
	case auth.Admin:
		return bus.Provision(ctx, conn.JS, names, Limits(cfg))
	case auth.Gateway:
		return bus.CreateMissing(ctx, conn.JS, names, Limits(cfg))
	}
	return bus.WaitStreams(ctx, conn.JS, auth.Resources(id, names), 2*time.Minute, log)
}

// Limits are the stream and bucket limits for a config: mesh.replicas and mesh.limits over the
// defaults.
func Limits(cfg *config.Config) bus.Limits {
	l := bus.DefaultLimits()
	l.Replicas = cfg.Mesh.Replicas
	ml := cfg.Mesh.Limits
	for base, sl := range ml.Streams() {
		cur := l.Streams[base]
		cur.MaxAge = config.DurationOr(sl.MaxAge, cur.MaxAge)
		if sl.MaxBytes > 0 {
			cur.MaxBytes = int64(sl.MaxBytes)
		}
		if sl.MaxMsgs > 0 {
			cur.MaxMsgs = sl.MaxMsgs
		}
		l.Streams[base] = cur
	}
	if ml.BucketMaxBytes > 0 {
		l.BucketMaxBytes = int64(ml.BucketMaxBytes)
	}
	l.SessionTTL = config.DurationOr(ml.SessionTTL, l.SessionTTL)
	l.ToolCallTTL = config.DurationOr(ml.ToolCallTTL, l.ToolCallTTL)
	l.StepTTL = config.DurationOr(ml.StepTTL, l.StepTTL)
	l.DedupWindow = config.DurationOr(ml.DedupWindow, l.DedupWindow)
	return l
}

// CheckKeys fails fast, before anything starts, when the model a role calls has no API key.
// Roles that call no model (gateway, toolhost, a planner without decomposition, a memoryd
// without a judge model) need none.
func CheckKeys(role string, cfg *config.Config) error {
	var bindings []config.LLM
	switch role {
	case protocol.RoleExecutor:
		bindings = append(bindings, cfg.ForRole(protocol.RoleExecutor))
	case protocol.RolePlanner:
		if cfg.Planner.Mode != "off" || cfg.Planner.LLM != nil {
			bindings = append(bindings, cfg.ForRole(protocol.RolePlanner))
		}
	case protocol.RoleMiner:
		if cfg.Miner.Enabled {
			bindings = append(bindings, cfg.ForRole(protocol.RoleMiner))
		}
	case "memoryd":
		if cfg.Miner.LLM != nil {
			bindings = append(bindings, *cfg.Miner.LLM)
		}
	}
	for _, b := range bindings {
		if err := core.CheckKey(b); err != nil {
			return err
		}
	}
	return nil
}

// ShutdownGrace is how long work in flight may go on after a service is told to stop.
const ShutdownGrace = 3 * time.Second

// InFlight returns the context for handlers of messages already taken: it outlives ctx by
// ShutdownGrace, so work half done when a service stops is finished if it can be quickly (and is
// redelivered and redone if not), without holding a shutdown for a slow call's whole deadline.
func InFlight(ctx context.Context) (context.Context, context.CancelFunc) {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(ShutdownGrace, cancel) })
	return hctx, func() { stop(); cancel() }
}
