package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/cli/mcpserve"
	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/service"
	"github.com/skein-mesh/skein/toolhost"
)

func init() {
	multiConfig["skein mcp serve"] = true
	extraCommands = append(extraCommands, newMCPCmd)
}

func newMCPCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "mcp", Short: "The Model Context Protocol: skein agents as MCP tools"}
	var httpAddr string
	var maxCalls int
	var wait time.Duration
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve each agent as an MCP tool, on stdio (desktop clients) or Streamable HTTP (--http)",
		Long: "serve offers the agent of each --config as an MCP tool, described as it is offered to other agents\n" +
			"as a tool. A call runs one session through the gateway (budgets, cancel, lineage and memory apply),\n" +
			"sends the session's events as progress notifications and answers with the final text and outcome;\n" +
			"a cancelled request cancels its session. Without --nats the agents run in an embedded mesh (state in\n" +
			"$SKEIN_HOME). On stdio, stdout carries only MCP; logs go to stderr. --http serves Streamable HTTP at\n" +
			"/mcp behind the gateway's bearer token.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return configError(err)
			}
			others, err := agentConfigs(cmd, cfg)
			if err != nil {
				return configError(err)
			}
			flagURL, _ := cmd.Flags().GetString("nats")
			if service.NATSURL(flagURL, cfg) == "" {
				for _, c := range append([]*config.Config{cfg}, others...) {
					if err := checkKeys(c, nil); err != nil {
						return err
					}
				}
			}
			var token string
			if httpAddr != "" {
				if token, _, err = gateway.HTTPToken(service.Home(), cfg.Gateway.HTTPToken); err != nil {
					return &exitError{code: protocol.ExitConfig, msg: "skein mcp serve: " + err.Error()}
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			cmd.SetContext(ctx)
			conn, names, _, closeMesh, err := dialMeshFull(cmd, cfg)
			if err != nil {
				return err
			}
			defer closeMesh()
			agents := []string{cfg.Agent.Name}
			for _, c := range others {
				agents = append(agents, c.Agent.Name)
			}
			log := meshLogger()
			srv, err := mcpserve.New(ctx, conn, names, agents, mcpserve.Options{
				Version: toolhost.Version, MaxCalls: maxCalls, Wait: wait, Logger: log,
				Cancel: func(ctx context.Context, session, reason string) error {
					rep, err := cancelSession(ctx, conn, names, session, "mcp client", reason)
					if err == nil {
						err = rep.Err()
					}
					return err
				},
			})
			if err != nil {
				return err
			}
			defer srv.Drain(20 * time.Second)
			if httpAddr == "" {
				err = srv.MCP().Run(ctx, &mcp.StdioTransport{})
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			return serveMCPHTTP(ctx, cmd, httpAddr, token, cfg.Gateway.HTTPToken, srv.MCP())
		},
	}
	serve.Flags().StringVar(&httpAddr, "http", "", "serve Streamable HTTP at http://ADDR/mcp (bearer token: the gateway's) instead of stdio")
	serve.Flags().IntVar(&maxCalls, "max-calls", mcpserve.DefaultMaxCalls, "calls running at once; one more is refused")
	serve.Flags().DurationVar(&wait, "wait", mcpserve.DefaultWait, "how long a call waits for its session before cancelling it")
	cmd.AddCommand(serve)
	return cmd
}

// serveMCPHTTP serves the MCP server at /mcp on addr until ctx ends.
func serveMCPHTTP(ctx context.Context, cmd *cobra.Command, addr, token, configured string, srv *mcp.Server) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return &exitError{code: protocol.ExitUnavailable, msg: "skein mcp serve: " + err.Error()}
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", gateway.Guard(token, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)))
	// No write timeout: a call's response streams for as long as its session runs.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(cmd.ErrOrStderr(), "skein mcp serve: http://%s/mcp, %s\n", ln.Addr(), httpTokenHint(configured))
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if hs.Shutdown(sctx) != nil {
			_ = hs.Close() // ends the calls still streaming: each cancels its session
		}
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return &exitError{code: protocol.ExitUnavailable, msg: "skein mcp serve: " + err.Error()}
	}
	return nil
}
