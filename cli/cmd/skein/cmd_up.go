package main

import (
	"fmt"
	"net"
	"net/url"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
	"github.com/skein-mesh/skein/pkg/service"
)

func newUpCmd() *cobra.Command {
	var listen, httpAddr string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole mesh in this process on an embedded NATS server",
		Long: "up starts an in-process NATS server (JetStream files under $SKEIN_HOME, default ./.skein) listening\n" +
			"on --listen so other processes (more executors, toolhosts) can join, and runs every service.\n" +
			"Connections need credentials: up writes one file per identity under $SKEIN_HOME/creds on first start.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			others, err := agentConfigs(cmd, cfg)
			if err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			for _, c := range append([]*config.Config{cfg}, others...) {
				if err := checkKeys(c); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log := service.Logger("mesh")
			mesh, err := startEmbedded(ctx, cfg, others, service.Home(), listen, log, httpAddr)
			if err != nil {
				return err
			}
			defer mesh.stop()
			out, creds := cmd.OutOrStdout(), auth.Dir(service.Home())
			fmt.Fprintf(out, "skein mesh up: %s (state in %s)\n", redact.URL(mesh.server.URL()), service.Home())
			fmt.Fprintf(out, "  join more executors: executor --nats %s --config agent.yaml\n", redact.URL(mesh.server.URL()))
			fmt.Fprintf(out, "  credentials: %s (one per role; a process with the same SKEIN_HOME finds its own;\n", creds)
			fmt.Fprintf(out, "    elsewhere copy the role's file and add --creds FILE, e.g. --creds %s)\n", auth.File(creds, auth.Executor))
			if httpAddr != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "  HTTP API: http://%s/v1/tasks, %s\n", httpAddr, httpTokenHint(cfg.Gateway.HTTPToken))
				if tok, _, err := gateway.HTTPToken(service.Home(), cfg.Gateway.HTTPToken); err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "console: %s\n", consoleURL(httpAddr, tok))
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case l := <-mesh.lost:
				// Re-making one role's connection in place would leave its subscriptions, consumers
				// and service endpoints behind; a clean stop and a restart by whatever supervises
				// `skein up` brings every role back.
				return &exitError{code: protocol.ExitUnavailable, msg: fmt.Sprintf(
					"skein up: the NATS server closed the %s's connection (%v) and it is not reconnected; the mesh stops so it can be started again", l.role, l.err)}
			}
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:4222", "address the embedded NATS server listens on")
	cmd.Flags().StringVar(&httpAddr, "http", "", "also serve the HTTP API on this address (e.g. 127.0.0.1:8080)")
	return cmd
}

// httpTokenHint says where the HTTP API's bearer token is, without printing the token itself
// (this output ends up in terminals' scrollback and in logs).
func httpTokenHint(configured string) string {
	_, path, err := gateway.HTTPToken(service.Home(), configured)
	switch {
	case err != nil:
		return "bearer token: " + err.Error()
	case path == "":
		return "bearer token from $" + gateway.HTTPTokenEnv + " or gateway.http_token"
	}
	return fmt.Sprintf("bearer token in %s:\n    curl -H \"Authorization: Bearer $(cat %s)\" -H 'Content-Type: application/json' -d '{\"task\": \"...\"}' http://...", path, path)
}

// consoleURL is the console's address with the bearer token in the fragment: a browser keeps the
// fragment to itself, so the token reaches the page but never a server's request line or logs.
func consoleURL(httpAddr, token string) string {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		host, port = httpAddr, "80"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // listening everywhere: this machine is one of them
	}
	return "http://" + net.JoinHostPort(host, port) + "/console/#token=" + url.PathEscape(token)
}
