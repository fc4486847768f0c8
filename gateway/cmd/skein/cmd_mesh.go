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
	var dryRun bool
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
	mesh.AddCommand(apply)
	return mesh
}
