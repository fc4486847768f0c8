package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
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
	var listen, httpAddr, rolesFlag string
	cmd := &cobra.Command{
		Use:   "up [--roles LIST] [--nats URL]",
		Short: "Run the mesh, or some of its roles, in this process (on an embedded NATS server, or joined to one)",
		Long: "up runs the mesh's roles in this process: " + strings.Join(allRoles, ", ") + " (--roles picks some).\n\n" +
			"With no mesh URL it starts an in-process NATS server (JetStream files under $SKEIN_HOME, default ./.skein)\n" +
			"listening on --listen, so other processes (more executors, toolhosts, roles on other machines) can join.\n" +
			"Connections need credentials: the server writes one file per identity under $SKEIN_HOME/creds on first start.\n\n" +
			"With a mesh URL (--nats, $SKEIN_NATS_URL or mesh.nats_url) it starts no server and joins that mesh: a\n" +
			"`skein server` elsewhere, or a NATS cluster (deploy/). Each role connects as its own identity, with\n" +
			"its file from $SKEIN_CREDS_DIR or $SKEIN_HOME/creds (--creds when one role runs), as the role binaries do:\n\n" +
			"  skein server --listen 0.0.0.0:4222                                    # machine A\n" +
			"  skein up --roles gateway,planner,memoryd,miner --nats nats://a:4222   # machine B\n" +
			"  skein up --roles executor,toolhost --nats nats://a:4222               # machine C",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			roles, err := parseRoles(rolesFlag)
			if err != nil {
				return usageError(cmd, err)
			}
			if httpAddr != "" && !roles.has("gateway") {
				return usageError(cmd, fmt.Errorf("--http serves the gateway's HTTP API, and --roles %s has no gateway", roles))
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return configError(err)
			}
			others, err := agentConfigs(cmd, cfg)
			if err != nil {
				return configError(err)
			}
			for _, c := range append([]*config.Config{cfg}, others...) {
				if err := checkKeys(c, roles); err != nil {
					return err
				}
			}
			flagURL, _ := cmd.Flags().GetString("nats")
			joinURL := service.NATSURL(flagURL, cfg)
			credsFlag, _ := cmd.Flags().GetString("creds")
			if joinURL == "" && credsFlag != "" {
				return usageError(cmd, errors.New("--creds is for joining a mesh (--nats URL); the embedded server's roles use the credentials it writes under $SKEIN_HOME/creds"))
			}
			if joinURL != "" && len(roles.list()) > 1 && (credsFlag != "" || os.Getenv("SKEIN_CREDS") != "" || cfg.Mesh.CredsFile != "") {
				return usageError(cmd, fmt.Errorf("--creds, $SKEIN_CREDS and mesh.creds_file name one identity's file, and the roles %s each connect as their own:\n"+
					"  put each role's file (<role>.nk) in $SKEIN_CREDS_DIR or $SKEIN_HOME/creds instead", roles))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log := service.Logger("mesh")
			mesh, err := startMesh(ctx, cfg, others, meshOptions{home: service.Home(), listen: listen, httpAddr: httpAddr,
				roles: roles, natsURL: joinURL, credsFlag: credsFlag}, log)
			if err != nil {
				return err
			}
			defer mesh.stop()
			out := cmd.OutOrStdout()
			if joinURL != "" {
				fmt.Fprintf(out, "skein roles up: %s, joined to the mesh at %s (state in %s)\n", roles, redact.URL(joinURL), service.Home())
			} else {
				printJoinHints(out, cmd, mesh.server.URL(), roles)
			}
			if httpAddr != "" {
				fmt.Fprintf(out, "  HTTP API: http://%s/v1/tasks, %s\n", httpAddr, httpTokenHint(cfg.Gateway.HTTPToken))
				if tok, _, err := gateway.HTTPToken(service.Home(), cfg.Gateway.HTTPToken); err == nil {
					fmt.Fprintf(out, "console: %s\n", consoleURL(httpAddr, tok))
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case d := <-mesh.down:
				// Re-making one role's connection in place would leave its subscriptions, consumers
				// and service endpoints behind; a clean stop and a restart by whatever supervises
				// `skein up` brings every role back. The statuses are a role binary's (service.Main).
				if d.connLost {
					return fail(protocol.ExitUnavailable,
						"up: the NATS server closed the %s's connection (%v) and it is not reconnected; the mesh stops so it can be started again", d.role, d.err)
				}
				return fail(protocol.ExitInternal, "up: the %s stopped: %v; the mesh stops so it can be started again", d.role, d.err)
			}
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:4222", "address the embedded NATS server listens on (without a mesh URL)")
	cmd.Flags().StringVar(&httpAddr, "http", "", "also serve the HTTP API on this address (e.g. 127.0.0.1:8080; with the gateway role)")
	cmd.Flags().StringVar(&rolesFlag, "roles", "all", "roles to run, separated by commas: "+strings.Join(allRoles, ", ")+", or all")
	return cmd
}

// printJoinHints says where the embedded mesh listens and how other processes join it, with the
// config files this one was given (another process serves the same agents with them).
func printJoinHints(out io.Writer, cmd *cobra.Command, natsURL string, roles roleSet) {
	at := redact.URL(natsURL)
	creds := auth.Dir(service.Home())
	fmt.Fprintf(out, "skein mesh up: %s (state in %s)\n", at, service.Home())
	if roles != nil {
		fmt.Fprintf(out, "  roles here: %s\n", roles)
	}
	fmt.Fprintf(out, "  join more executors: skein up --roles executor --nats %s%s\n", at, configArgs(cmd))
	fmt.Fprintf(out, "  credentials: %s (one per role; a process with the same SKEIN_HOME finds its own;\n", creds)
	fmt.Fprintf(out, "    elsewhere copy the role's file and add --creds FILE, e.g. --creds %s)\n", auth.File(creds, auth.Executor))
}

// configArgs repeats the --config flags this command was given, as they were written; with none,
// the ./agent.yaml it read if there is one.
func configArgs(cmd *cobra.Command) string {
	paths, _ := cmd.Flags().GetStringArray("config")
	if len(paths) == 0 {
		if _, err := os.Stat("agent.yaml"); err != nil {
			return ""
		}
		paths = []string{"agent.yaml"}
	}
	var b strings.Builder
	for _, p := range paths {
		b.WriteString(" --config " + shellWord(p))
	}
	return b.String()
}

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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
