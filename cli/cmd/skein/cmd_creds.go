package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/service"
)

func init() { extraCommands = append(extraCommands, newCredsCmd) }

// newCredsCmd prepares identities for a mesh that runs on its own NATS servers (deploy/): the
// embedded server makes them by itself.
func newCredsCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "creds [--dir DIR]",
		Short: "Create any missing NATS credentials (one per role, client, admin) and print their public keys",
		Long: "creds writes one nkey seed file per identity into DIR (default $SKEIN_HOME/creds; 0600 files in a\n" +
			"0700 folder), keeping existing ones, and prints SKEIN_NKEY_<IDENTITY>=<public key> lines: the\n" +
			"environment deploy/nats/auth.conf reads. Give each process only its own file (--creds, $SKEIN_CREDS,\n" +
			"or $SKEIN_CREDS_DIR). To rotate one identity, delete its file, run creds again, update the server's\n" +
			"environment and reload it (`skein up` re-reads its own at start).\n\n" +
			"It also writes DIR/http.env, one SKEIN_HTTP_TOKEN=<token> line (kept if present): the bearer token\n" +
			"every gateway of a deployment shares (compose's env_file, or a Kubernetes Secret made with\n" +
			"kubectl create secret generic skein-http --from-env-file=DIR/http.env). Delete it to rotate.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				dir = auth.Dir(service.Home())
			}
			pub, err := auth.Ensure(dir)
			if err != nil {
				return err
			}
			// The token goes to its own file, not to stdout: that output becomes the NATS
			// servers' environment, which has no business holding the HTTP API's token.
			tokenEnv, err := gateway.EnsureHTTPTokenEnv(dir)
			if err != nil {
				return err
			}
			for _, id := range auth.Identities {
				fmt.Fprintf(cmd.OutOrStdout(), "%s=%s\n", auth.EnvKey(id), pub[id])
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "HTTP API token for the gateways: %s\n", tokenEnv)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "folder of the credentials files (default $SKEIN_HOME/creds)")
	var ns string
	conf := &cobra.Command{
		Use:   "conf [--namespace NS]",
		Short: "Print the permission matrix as a nats-server authorization block (deploy/nats/auth.conf)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ns == "" {
				if cfg, err := loadConfig(cmd); err == nil {
					ns = cfg.Mesh.Namespace
				}
			}
			fmt.Fprint(cmd.OutOrStdout(), auth.RenderConf(protocol.NewNames(ns)))
			return nil
		},
	}
	conf.Flags().StringVar(&ns, "namespace", "", "mesh namespace (default mesh.namespace of the config, then skein)")
	cmd.AddCommand(conf)
	return cmd
}
