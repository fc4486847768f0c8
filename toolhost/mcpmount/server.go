// Package mcpmount mounts MCP servers as skein tools: it starts a stdio server once under the
// tool sandbox (or reaches one over Streamable HTTP), keeps it running (restarts with backoff),
// follows its tool list, and calls its tools with skein's time limits, cancellation and result
// shape. The toolhost serves what it lists on the mesh like any other tool.
package mcpmount

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
	"github.com/skein-mesh/skein/pkg/tools"
)

// Version is how skein names itself to MCP servers.
const Version = "0.1.0"

// DefaultStartTimeout bounds connecting, initializing and listing tools when the server's
// start_timeout_s is not set.
const DefaultStartTimeout = 30 * time.Second

// Restarts back off from restartMin to restartMax between tries, and start over from restartMin
// once a server has run for stableAfter.
var (
	restartMin  = 500 * time.Millisecond
	restartMax  = 30 * time.Second
	stableAfter = 30 * time.Second
)

// Options are what a Server takes from its host.
type Options struct {
	// Runner starts stdio servers under the tool sandbox.
	Runner *tools.Runner
	// DefaultTimeout and DefaultMaxOutput apply where the server's config leaves them at 0
	// (the host's tools.timeout_s and tools.max_output_bytes).
	DefaultTimeout   time.Duration
	DefaultMaxOutput int
	// LookupEnv reads the variables ${NAME} in env and headers refer to (nil: os.LookupEnv).
	LookupEnv func(string) (string, bool)
	Logger    *slog.Logger
	// OnTools is called with the server's tools each time they are listed (at every start and
	// on notifications/tools/list_changed), from one goroutine at a time.
	OnTools func(tools []Tool)
}

// Server is one mounted MCP server.
type Server struct {
	name      string
	cfg       config.MCPServer
	opts      Options
	log       *slog.Logger
	timeout   time.Duration
	maxOutput int
	// relist is signalled by notifications/tools/list_changed.
	relist chan struct{}

	mu  sync.Mutex
	cur *conn
	// up is closed when cur is set; a new one replaces it when the server goes down.
	up chan struct{}
	// down says why the server is not running ("" while it runs).
	down string
	// listMu keeps one listing at a time, so OnTools sees lists in order.
	listMu sync.Mutex
	// tried is closed once the first start has ended, started or not.
	tried     chan struct{}
	triedOnce sync.Once
}

// conn is one running connection to the server.
type conn struct {
	sess *mcp.ClientSession
	proc *tools.Process // nil for a server at a URL
}

// New makes a server from its config; Run starts and supervises it.
func New(name string, cfg config.MCPServer, opts Options) *Server {
	s := &Server{name: name, cfg: cfg, opts: opts, up: make(chan struct{}), down: "starting", relist: make(chan struct{}, 1),
		tried: make(chan struct{})}
	s.log = opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("mcp_server", name)
	s.timeout = opts.DefaultTimeout
	if cfg.TimeoutS > 0 {
		s.timeout = time.Duration(cfg.TimeoutS * float64(time.Second))
	}
	if s.timeout <= 0 {
		s.timeout = tools.DefaultTimeout
	}
	s.maxOutput = cmpOr(cfg.MaxOutput, opts.DefaultMaxOutput, tools.DefaultMaxOutput)
	return s
}

// Name is the server's name (its key in tools.mcp).
func (s *Server) Name() string { return s.name }

// Pid is the process id of a stdio server while it runs (0 otherwise).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || s.cur.proc == nil {
		return 0
	}
	return s.cur.proc.Pid()
}

// Tried is closed once the first start has ended: the server runs and its tools went to OnTools,
// or it failed and said why. A host waits for it so that it is ready with every tool it can serve.
func (s *Server) Tried() <-chan struct{} { return s.tried }

// StartTimeout bounds one start (start_timeout_s).
func (s *Server) StartTimeout() time.Duration { return s.startTimeout() }

// Timeout is one call's limit.
func (s *Server) Timeout() time.Duration { return s.timeout }

// startTimeout bounds one start: connect, initialize, list.
func (s *Server) startTimeout() time.Duration {
	if s.cfg.StartTimeoutS > 0 {
		return time.Duration(s.cfg.StartTimeoutS * float64(time.Second))
	}
	return DefaultStartTimeout
}

// Run starts the server and keeps it running until ctx ends: a server that exits or drops its
// connection is started again, with backoff between tries. The first failure of a run of
// failures is logged as one line saying why and what to check, and the recovery as another.
func (s *Server) Run(ctx context.Context) {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(restartMin), backoff.WithMaxInterval(restartMax),
		backoff.WithMaxElapsedTime(0))
	failing := false
	defer s.triedOnce.Do(func() { close(s.tried) })
	for ctx.Err() == nil {
		started := time.Now()
		c, listed, err := s.start(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			s.setDown(err.Error())
			wait := b.NextBackOff()
			if !failing {
				s.log.Warn("MCP server cannot start; its tools are not served until it does, tried again with backoff",
					"err", err, "check", s.hint(), "next_try", wait.Round(time.Millisecond))
			} else {
				s.log.Debug("MCP server still cannot start", "err", err, "next_try", wait.Round(time.Millisecond))
			}
			failing = true
			s.triedOnce.Do(func() { close(s.tried) })
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			continue
		}
		if failing {
			s.log.Info("MCP server started after failing", "tools", len(listed))
		} else {
			s.log.Info("MCP server started", "tools", len(listed))
		}
		failing = false
		s.publish(listed)
		s.setUp(c)
		s.triedOnce.Do(func() { close(s.tried) })
		why := s.serve(ctx, c)
		s.setDown(why)
		c.close()
		if ctx.Err() != nil {
			break
		}
		if time.Since(started) >= stableAfter {
			b.Reset()
		}
		wait := b.NextBackOff()
		s.log.Warn("MCP server stopped; starting it again", "why", why, "next_try", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	s.setDown("the toolhost is stopping")
}

// serve follows a running connection until it ends (its reason) or ctx does, relisting the
// server's tools when it says they changed.
func (s *Server) serve(ctx context.Context, c *conn) string {
	ended := make(chan error, 1)
	go func() { ended <- c.sess.Wait() }()
	for {
		select {
		case <-ctx.Done():
			return "the toolhost is stopping"
		case err := <-ended:
			return c.why(err)
		case <-s.relist:
			lctx, cancel := context.WithTimeout(ctx, s.startTimeout())
			listed, err := s.list(lctx, c.sess)
			cancel()
			if err != nil {
				s.log.Warn("MCP server's tools could not be listed again after it said they changed; serving the ones listed before", "err", err)
				continue
			}
			s.log.Info("MCP server's tools changed", "tools", len(listed))
			s.publish(listed)
		}
	}
}

// start connects to the server (starting its process for stdio), initializes and lists its tools.
func (s *Server) start(ctx context.Context) (*conn, []Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.startTimeout())
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "skein-toolhost", Version: Version}, &mcp.ClientOptions{
		// No roots: a server such as server-filesystem would otherwise ask the client which
		// folders it may use, instead of the ones its arguments name.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.relist <- struct{}{}:
			default: // one relist pending covers every change before it
			}
		},
	})
	c := &conn{}
	var t mcp.Transport
	if s.cfg.URL != "" {
		headers, err := s.headers()
		if err != nil {
			return nil, nil, err
		}
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, MaxEventSize: s.frameLimit(),
			HTTPClient: &http.Client{Transport: headerTransport{headers: headers, base: http.DefaultTransport}}}
	} else {
		env, err := s.env()
		if err != nil {
			return nil, nil, err
		}
		p, err := s.opts.Runner.StartProcess(tools.ProcessSpec{Name: "mcp-" + s.name, Command: append([]string{s.cfg.Command}, s.cfg.Args...),
			Dir: s.cfg.Cwd, Env: env, Limits: s.cfg.Sandbox.Limits(), Tmp: s.cfg.Sandbox.Tmp, SeccompAllow: s.cfg.Sandbox.SeccompAllow})
		if err != nil {
			return nil, nil, err
		}
		c.proc = p
		t = &mcp.IOTransport{Reader: p.Stdout, Writer: p.Stdin, MaxLineLength: s.frameLimit()}
	}
	sess, err := client.Connect(ctx, t, nil)
	if err != nil {
		err = c.startError(ctx, "connect and initialize", err)
		c.close()
		return nil, nil, err
	}
	c.sess = sess
	listed, err := s.list(ctx, sess)
	if err != nil {
		err = c.startError(ctx, "list its tools", err)
		c.close()
		return nil, nil, err
	}
	return c, listed, nil
}

// frameLimit bounds one message from the server: room for the largest result served (its JSON
// escaped once more inside the message) and then some. A message over it ends the connection,
// and the server is started again.
func (s *Server) frameLimit() int {
	return 2*s.maxOutput + 1<<20
}

func (s *Server) list(ctx context.Context, sess *mcp.ClientSession) ([]Tool, error) {
	var listed []*mcp.Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		listed = append(listed, t)
		if len(listed) > 4*MaxTools {
			break // enough to say there are too many
		}
	}
	served, skipped := catalogue(s.name, s.cfg, s.timeout.Seconds(), listed)
	for _, why := range skipped {
		s.log.Warn("MCP server tool not served", "tool", why)
	}
	return served, nil
}

func (s *Server) publish(listed []Tool) {
	s.listMu.Lock()
	defer s.listMu.Unlock()
	if s.opts.OnTools != nil {
		s.opts.OnTools(listed)
	}
}

func (s *Server) setUp(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur, s.down = c, ""
	close(s.up)
}

func (s *Server) setDown(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		s.up = make(chan struct{})
	}
	s.cur, s.down = nil, why
}

// hint says what to check when the server cannot start.
func (s *Server) hint() string {
	if s.cfg.URL != "" {
		return fmt.Sprintf("that tools.mcp.%s.url (%s) answers MCP over Streamable HTTP and its headers are right", s.name, redact.URL(s.cfg.URL))
	}
	return fmt.Sprintf("tools.mcp.%s.command and args: the server must speak MCP on stdin and stdout, and run as the sandbox's user (tools.sandbox.run_as)", s.name)
}

// env is the stdio server's added environment, ${NAME} taken from the host's; the values taken
// are redacted from logs and traces.
func (s *Server) env() ([]string, error) {
	var out []string
	for k, v := range s.cfg.Env {
		val, err := s.expand(v)
		if err != nil {
			return nil, fmt.Errorf("tools.mcp.%s.env.%s: %w", s.name, k, err)
		}
		out = append(out, k+"="+val)
	}
	return out, nil
}

func (s *Server) headers() (http.Header, error) {
	h := http.Header{}
	for k, v := range s.cfg.Headers {
		val, err := s.expand(v)
		if err != nil {
			return nil, fmt.Errorf("tools.mcp.%s.headers.%s: %w", s.name, k, err)
		}
		h.Set(k, val)
	}
	return h, nil
}

func (s *Server) expand(v string) (string, error) {
	lookup := s.opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	out, secrets, err := config.ExpandEnv(v, lookup)
	redact.AddValues(secrets...)
	return out, err
}

// headerTransport adds the configured headers to every request to the server.
type headerTransport struct {
	headers http.Header
	base    http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range t.headers {
		r.Header[k] = vs
	}
	return t.base.RoundTrip(r)
}

func (c *conn) close() {
	if c.sess != nil {
		// Closing a stdio session waits for the process to leave; it is killed below instead.
		go func(sess *mcp.ClientSession) { _ = sess.Close() }(c.sess)
	}
	if c.proc != nil {
		c.proc.Stop()
	}
}

// why says why a connection ended: how its process exited, or the transport's error.
func (c *conn) why(err error) string {
	if c.proc != nil {
		if exit := c.exit(); exit != "" {
			return "the server " + exit
		}
	}
	if err == nil {
		return "the server closed the connection"
	}
	return "the connection failed: " + err.Error()
}

// exit waits briefly for a stdio server's process to be reaped once its output ended, and says
// how it ended ("" while it runs).
func (c *conn) exit() string {
	if c.proc == nil {
		return ""
	}
	select {
	case <-c.proc.Done():
	case <-time.After(2 * time.Second):
	}
	return c.proc.Exit()
}

// startError is a failed start with what the server said on stderr.
func (c *conn) startError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		err = fmt.Errorf("no answer within the start timeout (start_timeout_s): %w", err)
	}
	if exit := c.exit(); exit != "" {
		return fmt.Errorf("%s: the server %s", what, exit)
	}
	if c.proc != nil {
		if tail := lastLine(c.proc.Stderr()); tail != "" {
			return fmt.Errorf("%s: %w (its stderr ends: %s)", what, err, tail)
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// current waits until the server runs, or ctx ends.
func (s *Server) current(ctx context.Context) (*conn, string) {
	for {
		s.mu.Lock()
		c, up, down := s.cur, s.up, s.down
		s.mu.Unlock()
		if c != nil {
			return c, ""
		}
		select {
		case <-up:
		case <-ctx.Done():
			return nil, down
		}
	}
}

var errTimedOut = errors.New("the call's time limit passed")

// Call calls the server's tool with args within the server's time limit (or until ctx ends,
// when the server is sent notifications/cancelled), and maps whatever happens onto one
// ToolResult. A call that arrives while the server restarts waits for it within that limit.
func (s *Server) Call(ctx context.Context, t Tool, args json.RawMessage) protocol.ToolResult {
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}")
	}
	if t.schema != nil {
		if err := t.schema.Validate(args); err != nil {
			return protocol.ToolResult{Kind: protocol.ToolErrBadArgs, Error: clip(err.Error(), maxErrorLen)}
		}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, errTimedOut)
	defer cancel()
	c, down := s.current(ctx)
	if c == nil {
		return protocol.ToolResult{Kind: protocol.ToolErrUnavailable,
			Error: clip(fmt.Sprintf("the %s MCP server is not running (%s); the toolhost starts it again with backoff", s.name, down), maxErrorLen)}
	}
	res, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: t.Remote, Arguments: args})
	switch {
	case err == nil:
		return result(res, s.maxOutput)
	case ctx.Err() != nil:
		if context.Cause(ctx) == errTimedOut {
			return protocol.ToolResult{Kind: protocol.ToolErrTimeout,
				Error: fmt.Sprintf("timed out after %s; the %s MCP server was sent notifications/cancelled", s.timeout, s.name)}
		}
		return protocol.ToolResult{Kind: protocol.ToolErrTimeout,
			Error: fmt.Sprintf("call abandoned (%v); the %s MCP server was sent notifications/cancelled", context.Cause(ctx), s.name)}
	}
	if out, ok := rpcFailure(s.name, t.Remote, err); ok {
		return out
	}
	if errors.Is(err, mcp.ErrConnectionClosed) || c.proc != nil && c.exit() != "" {
		out := protocol.ToolResult{Kind: protocol.ToolErrExit, Error: clip(fmt.Sprintf(
			"the %s MCP server stopped during the call (%s); the toolhost starts it again, and the call may or may not have taken effect",
			s.name, c.why(err)), maxErrorLen)}
		if c.proc != nil {
			out.Stderr = c.proc.Stderr()
		}
		return out
	}
	return protocol.ToolResult{Kind: protocol.ToolErrUnavailable, Error: clip(fmt.Sprintf("calling %s on the %s MCP server: %v", t.Remote, s.name, err), maxErrorLen)}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n\r\t "), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

func cmpOr(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}
