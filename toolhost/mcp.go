package toolhost

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/toolhost/mcpmount"
)

// mcpMounts serves the tools of the MCP servers in tools.mcp: each tool a server lists gets an
// endpoint on skein.tool.<server>__<tool> and a spec in the catalogue, as a manifest tool does,
// and its calls go through the same slots, claims and limits.
type mcpMounts struct {
	h     *handler
	svc   micro.Service
	names protocol.Names
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	ctx   context.Context
	// taken are the names of the manifest tools and agents: a server's tool may not shadow one.
	taken map[string]bool

	mu sync.Mutex
	// tools maps a served name to the server's tool it calls now; a name stays in endpoints
	// once its endpoint exists (micro cannot remove one), and answers unknown_tool when its
	// server no longer lists it.
	tools     map[string]mcpTool
	endpoints map[string]bool
	// listed are each server's names in its last listing.
	listed map[string][]string
}

type mcpTool struct {
	server *mcpmount.Server
	tool   mcpmount.Tool
}

// mountMCP starts every server in tools.mcp and waits for each one's first start to end (each
// within its start timeout), so a host that is ready serves every tool it can. A server that
// cannot start does not stop the toolhost: it says why in one line and is tried again.
func (x *Host) mountMCP(ctx context.Context, d Deps, cfg *config.Config, taken map[string]bool) error {
	if len(cfg.Tools.MCP) == 0 {
		return nil
	}
	kv, err := bus.KV(ctx, d.Conn.JS, d.Names, protocol.BucketTools)
	if err != nil {
		return fmt.Errorf("toolhost: %w", err)
	}
	m := &mcpMounts{h: x.h, svc: x.svc, names: d.Names, js: d.Conn.JS, kv: kv, ctx: x.h.ctx, taken: maps.Clone(taken),
		tools: map[string]mcpTool{}, endpoints: map[string]bool{}, listed: map[string][]string{}}
	x.mcp = m
	var servers []*mcpmount.Server
	for _, name := range slices.Sorted(maps.Keys(cfg.Tools.MCP)) {
		var s *mcpmount.Server
		s = mcpmount.New(name, cfg.Tools.MCP[name], mcpmount.Options{
			Runner:           x.h.runner,
			DefaultTimeout:   time.Duration(cfg.Tools.TimeoutS * float64(time.Second)),
			DefaultMaxOutput: int(cfg.Tools.MaxOutput),
			Logger:           x.log,
			OnTools:          func(ts []mcpmount.Tool) { m.mount(s, ts) },
		})
		servers = append(servers, s)
		// Servers run under the calls' context: they stop when the toolhost's grace period ends.
		go s.Run(x.h.ctx)
	}
	for _, s := range servers {
		select {
		case <-s.Tried():
		case <-time.After(s.StartTimeout() + 5*time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// mount serves a server's listed tools: new ones get an endpoint, every one its spec in the
// catalogue, and those it no longer lists leave the catalogue.
func (m *mcpMounts) mount(s *mcpmount.Server, ts []mcpmount.Tool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var specs []protocol.ToolSpec
	now := map[string]bool{}
	for _, t := range ts {
		name := t.Spec.Name
		if m.taken[name] {
			m.h.log.Warn("MCP server's tool not served: a manifest tool or an agent has its name", "mcp_server", s.Name(), "tool", name)
			continue
		}
		if prev, ok := m.tools[name]; ok && prev.server != s {
			m.h.log.Warn("MCP server's tool not served: another server's tool has its name", "mcp_server", s.Name(), "tool", name,
				"other", prev.server.Name())
			continue
		}
		if !m.endpoints[name] {
			err := m.svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) { m.h.serve(name, r, m.preparer(name)) }),
				micro.WithEndpointSubject(m.names.Tool(name)),
				micro.WithEndpointQueueGroup(protocol.QueueToolhost),
				micro.WithEndpointMetadata(map[string]string{"description": t.Spec.Description, "mcp": s.Name()}))
			if err != nil {
				m.h.log.Warn("MCP server's tool not served: no endpoint", "mcp_server", s.Name(), "tool", name, "err", err)
				continue
			}
			m.endpoints[name] = true
		}
		m.tools[name] = mcpTool{server: s, tool: t}
		now[name] = true
		specs = append(specs, t.Spec)
	}
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	// Published after the endpoints exist, so a tool in the catalogue is one that answers.
	if err := tools.Publish(ctx, m.js, m.names, specs); err != nil {
		m.h.log.Warn("MCP server's tools not in the catalogue; executors do not offer them until it lists them again", "mcp_server", s.Name(), "err", err)
	}
	for _, name := range m.listed[s.Name()] {
		if now[name] {
			continue
		}
		delete(m.tools, name)
		// Only the entry this server's tool wrote: another host's server of the same name may
		// list it still, and writes it again when it lists.
		if e, err := m.kv.Get(ctx, name); err == nil {
			var spec protocol.ToolSpec
			if protocol.Unmarshal(e.Value(), &spec) == nil && spec.MCP == s.Name() {
				if err := m.kv.Delete(ctx, name, jetstream.LastRevision(e.Revision())); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
					m.h.log.Debug("MCP tool left in the catalogue", "tool", name, "err", err)
				}
			}
		}
	}
	m.listed[s.Name()] = slices.Sorted(maps.Keys(now))
}

// preparer readies a call of the served tool name: the server's tool it maps to now, called
// within the call's context (its caller's deadline, its session's cancel).
func (m *mcpMounts) preparer(name string) preparer {
	return func(req protocol.ToolRequest, start time.Time) prepared {
		return prepared{
			run: func() protocol.ToolReply {
				res := m.h.call(name, req, func(ctx context.Context) protocol.ToolResult {
					m.mu.Lock()
					t, ok := m.tools[name]
					m.mu.Unlock()
					if !ok {
						return protocol.ToolResult{Kind: protocol.ToolErrUnknown,
							Error: fmt.Sprintf("%s is no longer listed by its MCP server; find another tool", name)}
					}
					return t.server.Call(ctx, t.tool, req.Args)
				})
				return protocol.ToolReply{ToolResult: res, LatencyMS: time.Since(start).Milliseconds(), Host: m.h.host}
			},
			close: func() {},
		}
	}
}

// served are the names of the MCP tools served now.
func (m *mcpMounts) served() []string {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.tools))
}
