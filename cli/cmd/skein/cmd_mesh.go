package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/service"
)

func init() { extraCommands = append(extraCommands, newMeshCmd) }

// newMeshCmd is `skein mesh apply`: the one way a config's stream and bucket limits replace
// what an operator set on the server. Every role only creates what is missing.
func newMeshCmd() *cobra.Command {
	mesh := &cobra.Command{Use: "mesh", Short: "Inspect and apply the mesh's streams and buckets"}
	var dryRun, asJSON bool
	apply := &cobra.Command{
		Use:   "apply [--dry-run]",
		Short: "Change existing streams and buckets to the limits of the config (mesh.replicas, mesh.limits)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBus(cmd, func(env meshEnv) error {
				diffs, err := bus.ProvisionWith(cmd.Context(), env.conn.JS, env.names, service.Limits(env.cfg),
					bus.ProvisionOptions{Apply: !dryRun})
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if asJSON {
					out := meshApplyJSON{DryRun: dryRun, Changes: []meshChangeJSON{}}
					for _, d := range diffs {
						out.Changes = append(out.Changes, meshChangeJSON{Resource: d.Resource, Field: d.Field, Have: d.Have, Want: d.Want})
					}
					return writeJSON(w, out)
				}
				if len(diffs) == 0 {
					fmt.Fprintln(w, "every stream and bucket matches the config")
					return nil
				}
				verb := "changed"
				if dryRun {
					verb = "would change"
				}
				for _, d := range diffs {
					fmt.Fprintf(w, "%s %s: %s %s -> %s\n", verb, d.Resource, d.Field, d.Have, d.Want)
				}
				return nil
			})
		},
	}
	apply.Flags().BoolVar(&dryRun, "dry-run", false, "only list the differences")
	apply.Flags().BoolVar(&asJSON, "json", false, `print {"dry_run", "changes": [{"resource", "field", "have", "want"}]}`)
	mesh.AddCommand(apply)
	return mesh
}

// meshApplyJSON is `skein mesh apply --json`: the differences found, changed unless dry_run.
type meshApplyJSON struct {
	DryRun  bool             `json:"dry_run"`
	Changes []meshChangeJSON `json:"changes"`
}

type meshChangeJSON struct {
	Resource string `json:"resource"`
	Field    string `json:"field"`
	Have     string `json:"have"`
	Want     string `json:"want"`
}
