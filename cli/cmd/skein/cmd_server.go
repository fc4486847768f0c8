package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
	"github.com/skein-mesh/skein/pkg/service"
)

func init() { extraCommands = append(extraCommands, newServerCmd) }

// newServerCmd is `skein server`: the NATS server of `skein up` alone, for meshes whose roles run
// in other processes or on other machines (`skein up --roles ... --nats URL`).
func newServerCmd() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "server [--listen ADDR]",
		Short: "Run only the mesh's NATS server (JetStream, the permission matrix, credentials) for roles that join it",
		Long: "server starts the NATS server that `skein up` embeds, and nothing else: JetStream files under\n" +
			"$SKEIN_HOME (default ./.skein), one credentials file per identity under $SKEIN_HOME/creds (written on\n" +
			"first start; the server admits only those identities, each with its row of the permission matrix,\n" +
			"docs/security.md), and the streams and buckets provisioned with the config's mesh.limits and\n" +
			"mesh.replicas. Roles join it with `skein up --roles LIST --nats URL` (or the role binaries), each with\n" +
			"its own credentials file copied from $SKEIN_HOME/creds; a machine gets only the files of the roles\n" +
			"it runs. Listening beyond this machine (--listen 0.0.0.0:4222), put mesh.tls in the config.\n" +
			"Read-only commands run with the same SKEIN_HOME find it by themselves.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return configError(err)
			}
			if u, _ := cmd.Flags().GetString("nats"); u != "" {
				return usageError(cmd, errors.New("server starts a NATS server; --nats is for processes that join one"))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			m, err := startServer(ctx, cfg, service.Home(), listen, service.Logger("server"))
			if err != nil {
				return err
			}
			defer m.stop()
			at := redact.URL(m.server.URL())
			elsewhere := reachableURL(m.server.URL())
			creds := auth.Dir(service.Home())
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "skein server up: %s (state in %s)\n", at, service.Home())
			fmt.Fprintf(out, "  credentials: %s, one file per identity; give each machine only its roles' files,\n", creds)
			fmt.Fprintf(out, "    in its $SKEIN_HOME/creds (or $SKEIN_CREDS_DIR); never admin.nk\n")
			fmt.Fprintf(out, "  roles:   skein up --roles gateway,planner,memoryd,miner --nats %s%s\n", elsewhere, configArgs(cmd))
			fmt.Fprintf(out, "           skein up --roles executor,toolhost --nats %s%s\n", elsewhere, configArgs(cmd))
			fmt.Fprintf(out, "  a task:  skein run --nats %s --creds client.nk \"...\"\n", elsewhere)
			select {
			case <-ctx.Done():
				return nil
			case d := <-m.down: // the connection provisioning and watching the store
				return fail(protocol.ExitUnavailable, "server: its %s connection was closed (%v); it stops so it can be started again", d.role, d.err)
			}
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:4222", "address the NATS server listens on (0.0.0.0:4222 for other machines)")
	return cmd
}

// reachableURL is how another machine reaches a server listening on every address: by this
// host's name rather than 0.0.0.0.
func reachableURL(serverURL string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		return redact.URL(serverURL)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			u.Host = net.JoinHostPort(h, u.Port())
		}
	}
	return redact.URL(u.String())
}
