package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func init() { extraCommands = append(extraCommands, newSetupCmd) }

// newSetupCmd is `skein setup`: install what the in-process memory needs (ONNX Runtime and
// all-MiniLM-L6-v2) once for this user, so a skein binary anywhere finds it.
func newSetupCmd() *cobra.Command {
	var from string
	var force bool
	cmd := &cobra.Command{
		Use:   "setup [--from DIR] [--force]",
		Short: "Install ONNX Runtime and all-MiniLM-L6-v2 for this user (under $XDG_CACHE_HOME/skein)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dest := devenv.UserDir()
			if dest == "" {
				return &exitError{code: protocol.ExitConfig, msg: "skein setup: no user cache folder (set XDG_CACHE_HOME or HOME)"}
			}
			w := cmd.ErrOrStderr()
			if minilm.Installed(dest) && !force {
				fmt.Fprintf(cmd.OutOrStdout(), "memory models already installed in %s (--force installs again)\n", filepath.Join(dest, "memory"))
				return nil
			}
			if from == "" {
				// A checkout where `make setup` ran (or $SKEIN_TOOLS_DIR) has everything already.
				if t := devenv.ToolsDir(); t != dest && minilm.Installed(t) {
					from = t
				}
			}
			if err := minilm.Install(cmd.Context(), dest, from, w); err != nil {
				return &exitError{code: protocol.ExitUnavailable, msg: "skein setup: " + err.Error()}
			}
			lib, dir := minilm.Paths(minilm.Options{LibPath: filepath.Join(dest, "memory", "lib", "libonnxruntime.so"),
				ModelDir: filepath.Join(dest, "memory", "minilm")})
			e, err := minilm.Open(minilm.Options{LibPath: lib, ModelDir: dir})
			if err != nil {
				return &exitError{code: protocol.ExitInternal, msg: fmt.Sprintf("skein setup: installed in %s but it does not load: %v", dest, err)}
			}
			_ = e.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "memory models installed in %s; every skein binary of this user finds them\n", filepath.Join(dest, "memory"))
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "copy from this folder (laid out like a checkout's .tools) instead of building from the package registry")
	cmd.Flags().BoolVar(&force, "force", false, "install again even if already installed")
	return cmd
}
