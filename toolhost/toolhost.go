// Package toolhost serves subprocess tools on the mesh. It loads the manifests its configuration
// enables, publishes each tool's spec to the tools KV, and answers every tool as a micro endpoint
// in a shared queue group, so adding toolhost processes spreads the load.
package toolhost

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/pkg/trace"
)

// Version is reported in micro service discovery.
const Version = "0.1.0"

// Deps are what a toolhost needs.
type Deps struct {
	Conn   *bus.Conn
	Names  protocol.Names
	Config *config.Config
	Logger *slog.Logger
	Home   string
	// HostID names this toolhost in replies and logs ("" picks hostname-pid-random).
	HostID string
	// Concurrency bounds the tool processes running at once (0: toolhost.concurrency, else 4
	// per CPU, at least 8).
	Concurrency int
	// Queue is how many calls may wait for a slot (0: toolhost.queue, else Concurrency; -1: none).
	Queue int
	// ShutdownGrace is how long calls in flight may finish after ctx ends before their tools
	// are killed (0: 10s).
	ShutdownGrace time.Duration
	// AgentWait bounds how long a call of an agent in tools.agents waits for the child session
	// (0: DefaultAgentWait).
	AgentWait time.Duration
	// Ready, when set, is closed by Run once every tool is published and answering.
	Ready chan<- struct{}
}

// Run serves until ctx ends, then stops the micro service, lets calls in flight finish within
// the grace period and returns nil. It is New followed by Serve.
func Run(ctx context.Context, d Deps) error {
	h, err := New(ctx, d)
	if err != nil {
		return err
	}
	if d.Ready != nil {
		close(d.Ready)
	}
	return h.Serve(ctx)
}

// Host is a toolhost that is serving. New returns once every tool is published and answering,
// so a caller that starts the whole mesh can fail fast on bad manifests and start executors
// knowing the catalog is complete.
type Host struct {
	h           *handler
	svc         micro.Service
	nc          *nats.Conn
	log         *slog.Logger
	tools       []string
	grace       time.Duration
	killRunning context.CancelFunc
	stopOnce    sync.Once
	// stopWatch ends the watch on the registrations of the agents served as tools.
	stopWatch func()
	// mcp serves the tools of the MCP servers in tools.mcp (nil: none).
	mcp *mcpMounts
}

// New loads the enabled manifests, publishes their specs to the tools KV and registers the micro
// service with one endpoint per tool. Call Serve to keep serving and to shut down cleanly.
func New(ctx context.Context, d Deps) (*Host, error) {
	if d.Conn == nil || d.Conn.NC == nil {
		return nil, errors.New("toolhost: no NATS connection")
	}
	cfg := d.Config
	if cfg == nil {
		cfg = config.Default()
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id := d.HostID
	if id == "" {
		id = defaultHostID()
	}
	log = log.With("host", id)

	loaded, err := tools.LoadDirs(cfg.Tools.ManifestDirs, cfg.Tools.Enabled)
	if err != nil {
		return nil, fmt.Errorf("toolhost: load tool manifests (tools.manifest_dirs in %s): %w", configName(cfg), err)
	}

	// Calls run under their own context: ending Serve's ctx stops new calls, not the ones
	// running, until the grace period is over.
	runCtx, killRunning := context.WithCancel(context.WithoutCancel(ctx))
	h := &handler{
		runner: &tools.Runner{
			DefaultTimeout: time.Duration(cfg.Tools.TimeoutS * float64(time.Second)),
			MaxOutput:      int(cfg.Tools.MaxOutput),
			Sandbox:        sandboxOf(cfg.Tools.Sandbox),
		},
		host: id,
		log:  log,
		nc:   d.Conn.NC,
		ctx:  runCtx,
	}
	h.slots = make(chan struct{}, concurrency(cmp.Or(d.Concurrency, cfg.Toolhost.Concurrency)))
	h.waiting = make(chan struct{}, queueLen(cmp.Or(d.Queue, cfg.Toolhost.Queue), cap(h.slots)))
	calls, err := bus.KV(ctx, d.Conn.JS, d.Names, protocol.BucketToolCalls)
	if err != nil {
		killRunning()
		return nil, fmt.Errorf("toolhost: %w (every role provisions the mesh when it starts)", err)
	}
	h.ledger = &ledger{kv: calls, js: d.Conn.JS, host: id, log: log, trace: trace.NewPublisher(d.Conn.JS, d.Names, "toolhost@"+id),
		maxRecord: int(max(d.Conn.NC.MaxPayload()-4096, 4096)), poll: 100 * time.Millisecond}
	// Cancel notices stop the calls of a cancelled session, and refuse its late ones.
	if h.watch, err = govern.Watch(d.Conn.NC, d.Names); err != nil {
		killRunning()
		return nil, fmt.Errorf("toolhost: %w", err)
	}
	for _, t := range loaded {
		if err := h.runner.Check(t); err != nil {
			log.Warn("tool cannot start yet; calls will fail with cannot_start until this is fixed", "tool", t.Name, "err", err)
		}
		if why := h.runner.HostTmpReason(t); why != "" {
			log.Warn("tool sandbox: "+why, "tool", t.Name)
		}
	}
	svc, err := micro.AddService(d.Conn.NC, micro.Config{
		Name:        protocol.ServiceToolhost,
		Version:     Version,
		Description: "skein subprocess tools",
		QueueGroup:  protocol.QueueToolhost,
		Metadata:    map[string]string{"host": id},
	})
	if err != nil {
		killRunning()
		h.watch.Stop()
		return nil, fmt.Errorf("toolhost: add micro service: %w", err)
	}
	host := &Host{h: h, svc: svc, nc: d.Conn.NC, log: log, grace: d.ShutdownGrace, killRunning: killRunning}
	if host.grace <= 0 {
		host.grace = 10 * time.Second
	}
	for _, t := range loaded {
		err := svc.AddEndpoint(t.Name, micro.HandlerFunc(func(r micro.Request) { h.serve(t.Name, r, h.subprocess(t)) }),
			micro.WithEndpointSubject(d.Names.Tool(t.Name)),
			micro.WithEndpointQueueGroup(protocol.QueueToolhost),
			micro.WithEndpointMetadata(map[string]string{"description": t.Description}))
		if err != nil {
			host.stop()
			killRunning()
			return nil, fmt.Errorf("toolhost: endpoint for tool %s: %w", t.Name, err)
		}
		host.tools = append(host.tools, t.Name)
	}
	taken := map[string]bool{}
	for _, t := range loaded {
		taken[t.Name] = true
	}
	if err := host.addAgentEndpoints(ctx, d, cfg.Tools.Agents, taken); err != nil {
		host.stop()
		killRunning()
		return nil, err
	}
	slices.Sort(host.tools)
	if len(loaded) == 0 && len(cfg.Tools.Agents) == 0 && len(cfg.Tools.MCP) == 0 {
		log.Warn("no tools to serve: tools.manifest_dirs is empty or holds no manifests")
	}
	sandbox, err := h.runner.SandboxInfo()
	if err != nil {
		host.stop()
		killRunning()
		return nil, fmt.Errorf("toolhost: tools cannot run: %w", err)
	}
	// What this machine cannot confine, one line each with what that leaves open.
	for _, gap := range h.runner.SandboxGaps() {
		log.Warn("tool sandbox: " + gap)
	}
	if err := host.mountMCP(ctx, d, cfg, taken); err != nil {
		host.stop()
		killRunning()
		return nil, err
	}
	// Published last, so that a tool in the catalog is one that answers: executors offer the
	// catalog's tools to the model, and a caller that read it finds the endpoint there.
	specs := make([]protocol.ToolSpec, len(loaded))
	for i, t := range loaded {
		specs[i] = t.Spec()
	}
	if err := tools.Publish(ctx, d.Conn.JS, d.Names, specs); err != nil {
		host.stop()
		killRunning()
		return nil, fmt.Errorf("toolhost: %w", err)
	}
	log.Info("toolhost ready", "tools", host.Tools(), "concurrency", cap(h.slots), "queue", cap(h.waiting), "sandbox", sandbox)
	return host, nil
}

// Tools are the names of the tools this host serves now, sorted: its manifest tools, the agents
// it offers as tools, and the tools its MCP servers list.
func (x *Host) Tools() []string {
	out := append(slices.Clone(x.tools), x.mcp.served()...)
	slices.Sort(out)
	return out
}

// Serve blocks until ctx ends, then stops taking calls, waits up to the grace period for the
// calls in flight (killing their tools after it) and returns nil.
func (x *Host) Serve(ctx context.Context) error {
	defer x.killRunning()
	defer x.h.watch.Stop()
	<-ctx.Done()
	x.stop()
	done := make(chan struct{})
	go func() { x.h.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(x.grace):
		x.log.Warn("calls still running after the shutdown grace period; killing their tools", "grace", x.grace)
		x.killRunning()
		<-done
	}
	x.log.Info("toolhost stopped")
	return nil
}

// stop removes the endpoints; calls already taken keep running.
func (x *Host) stop() {
	x.stopOnce.Do(func() {
		if x.stopWatch != nil {
			x.stopWatch()
		}
		if err := x.svc.Stop(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			x.log.Warn("stop micro service", "err", err)
		}
		// A round trip makes sure the server has dropped our interest before Serve returns, so
		// callers get "no responders" (and try another host) instead of waiting on us.
		_ = x.nc.Flush()
		x.h.mu.Lock()
		x.h.closing = true
		x.h.mu.Unlock()
	})
}

type handler struct {
	runner *tools.Runner
	host   string
	log    *slog.Logger
	nc     *nats.Conn
	ctx    context.Context
	slots  chan struct{}
	// waiting holds a place for each call waiting for a slot; when it is full too, calls are
	// refused at once (kind busy) instead of piling up behind the handler.
	waiting chan struct{}
	ledger  *ledger
	watch   *govern.Watcher

	mu       sync.Mutex
	closing  bool
	inflight sync.WaitGroup
}

// serve takes one request off an endpoint of the tool named name, which prep readies for a run
// (a subprocess tool, or a tool of an MCP server). Endpoint callbacks are serialized per
// subscription, so serve never waits: the call runs on its own goroutine once it has a slot; with
// no slot free it waits in a bounded queue, and with the queue full it is refused at once with
// kind busy, so the caller can retry and another toolhost can take it.
func (h *handler) serve(name string, r micro.Request, prep preparer) {
	start := time.Now()
	reply := r.Reply()
	data := r.Data()
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		h.respond(reply, name, &protocol.ToolReply{Host: h.host, ToolResult: protocol.ToolResult{
			Kind: protocol.ToolErrUnavailable, Error: fmt.Sprintf("toolhost %s is shutting down; call %s again", h.host, name)}})
		return
	}
	h.inflight.Add(1)
	h.mu.Unlock()
	stopProgress := h.progress(r)
	queued := false
	select {
	case h.slots <- struct{}{}:
	default:
		select {
		case h.waiting <- struct{}{}:
			queued = true
		default:
			h.inflight.Done()
			stopProgress()
			h.respond(reply, name, &protocol.ToolReply{Host: h.host, ToolResult: protocol.ToolResult{Kind: protocol.ToolErrBusy,
				Error: fmt.Sprintf("toolhost %s is running %d tools with %d calls waiting; call %s again", h.host, cap(h.slots), cap(h.waiting), name)}})
			return
		}
	}
	go func() {
		defer h.inflight.Done()
		defer stopProgress() // a path that never answered still stops saying it will
		if queued {
			select {
			case h.slots <- struct{}{}:
				<-h.waiting
			case <-h.ctx.Done():
				<-h.waiting
				stopProgress()
				return
			}
		}
		defer func() { <-h.slots }()
		h.callOnce(name, data, start, prep, func(out protocol.ToolReply) {
			stopProgress()
			h.respond(reply, name, &out)
		})
	}()
}

// progress says "still running" on reply every protocol.CallProgressEvery until the returned
// stop is called, when the caller asked for it (HeaderCallProgress): a caller that stops hearing
// it asks again, and the host that gets the repeat takes the call over from a dead host.
func (h *handler) progress(r micro.Request) (stop func()) {
	reply := r.Reply()
	if reply == "" || r.Headers().Get(protocol.HeaderCallProgress) == "" {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(protocol.CallProgressEvery)
		defer t.Stop()
		beat := &nats.Msg{Subject: reply, Header: nats.Header{protocol.HeaderCallProgress: []string{"running"}}}
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = h.nc.PublishMsg(beat)
			}
		}
	}()
	// Stopping waits for the beat goroutine, so no beat follows the reply.
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// call runs one admitted call of the tool named name: run gets a context that ends at the
// caller's deadline or when the session is cancelled.
func (h *handler) call(name string, req protocol.ToolRequest, run func(context.Context) protocol.ToolResult) (res protocol.ToolResult) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("tool call panicked", "tool", name, "panic", p)
			res = protocol.ToolResult{Kind: protocol.ToolErrStart, Error: fmt.Sprintf("toolhost failed running %s: %v", name, p)}
		}
	}()
	if req.Tool != "" && req.Tool != name {
		return protocol.ToolResult{Kind: protocol.ToolErrUnknown, Error: fmt.Sprintf("request for tool %q arrived on the endpoint of %q", req.Tool, name)}
	}
	ctx, release, refusal := h.admit(req)
	if refusal != nil {
		return *refusal
	}
	defer release()
	res = run(ctx)
	h.log.Debug("tool call", "tool", name, "session", req.SessionID, "call", req.CallID, "ok", res.OK, "kind", res.Kind)
	return res
}

// respond publishes the reply itself: micro's Request must not be touched once its handler has
// returned, and calls finish on their own goroutines. A failed call carries its kind's code, in
// the reply and in the service error headers (bus.ReplyMsg).
func (h *handler) respond(subject, tool string, out *protocol.ToolReply) {
	if subject == "" {
		return // a plain publish, nobody waits for the answer
	}
	out.Coded()
	data, err := protocol.Marshal(out)
	if err != nil {
		h.log.Error("encode tool reply", "tool", tool, "err", err)
		out = &protocol.ToolReply{Host: h.host, LatencyMS: out.LatencyMS, ToolResult: protocol.ToolResult{
			Kind: protocol.ToolErrMalformed, Code: protocol.ToolKindCode(protocol.ToolErrMalformed),
			Error: "toolhost could not encode the tool's result: " + err.Error()}}
		data, _ = protocol.Marshal(out)
	}
	// A reply over the server's message limit would be dropped and leave the caller waiting
	// for a timeout; say what happened instead.
	if limit := h.nc.MaxPayload(); limit > 0 && int64(len(data)) > limit {
		h.log.Warn("tool reply over the NATS message limit", "tool", tool, "bytes", len(data), "limit", limit)
		out = &protocol.ToolReply{Host: h.host, LatencyMS: out.LatencyMS, ToolResult: protocol.ToolResult{
			Kind: protocol.ToolErrTooLarge, Code: protocol.ToolKindCode(protocol.ToolErrTooLarge), Truncated: true,
			Error: fmt.Sprintf("the tool's answer is %d bytes, over the %d-byte NATS message limit; lower max_output_bytes or return less", len(data), limit)}}
		data, _ = protocol.Marshal(out)
	}
	if err := h.nc.PublishMsg(bus.ReplyMsg(subject, data, out)); err != nil {
		h.log.Warn("send tool reply", "tool", tool, "err", err)
	}
}

func concurrency(n int) int {
	if n > 0 {
		return n
	}
	return max(8, 4*runtime.NumCPU())
}

// queueLen is the wait queue's size: n, or the slot count for 0, or none for -1.
func queueLen(n, slots int) int {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return slots
	}
	return n
}

func defaultHostID() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "toolhost"
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", name, os.Getpid(), hex.EncodeToString(b))
}

func configName(c *config.Config) string {
	if c.Path == "" {
		return "the default configuration"
	}
	return c.Path
}

// admit refuses a call whose caller's deadline has passed or whose session was cancelled (work
// nobody can use), and otherwise returns the call's context: it ends at the caller's deadline
// or when the session is cancelled, and then the tool's processes are killed.
func (h *handler) admit(req protocol.ToolRequest) (context.Context, func(), *protocol.ToolResult) {
	var deadline time.Time
	if req.DeadlineMS > 0 {
		deadline = time.UnixMilli(req.DeadlineMS)
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return nil, nil, &protocol.ToolResult{Kind: protocol.ToolErrTimeout,
			Error: fmt.Sprintf("not started: the caller's deadline %s had passed", deadline.UTC().Format(time.RFC3339Nano))}
	}
	if c, ok := h.watch.Cancelled(req.SessionID); ok {
		return nil, nil, &protocol.ToolResult{Kind: protocol.ToolErrUnavailable, Error: "not started: " + c.Error()}
	}
	ctx, release := h.watch.Track(h.ctx, req.SessionID)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		rel := release
		release = func() { cancel(); rel() }
	}
	return ctx, release, nil
}

// sandboxOf maps tools.sandbox of the config onto the runner's sandbox.
func sandboxOf(c config.ToolSandbox) tools.Sandbox {
	return tools.Sandbox{
		Limits:     tools.Limits{CPUSeconds: c.CPUSeconds, AddressSpaceMB: c.AddressSpaceMB, OpenFiles: c.OpenFiles, Processes: c.Processes, ShmMB: c.ShmMB},
		RunAs:      c.RunAs,
		UIDs:       c.UIDs,
		Cgroup:     c.Cgroup,
		Start:      c.Start,
		Trampoline: c.Trampoline,
		ScratchDir: c.ScratchDir,
	}
}
