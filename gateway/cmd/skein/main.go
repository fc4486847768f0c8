// Command skein is the mesh's command line: it scaffolds projects, runs tasks (on an embedded
// mesh by default), runs the whole mesh in one process, and reads traces, memory and usage.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/harden"
)

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	_ = harden.Process() // provider keys and credentials live in this process: see pkg/harden
	root := &cobra.Command{
		Use:           "skein",
		Short:         "A local-first mesh of LLM agents that learn from their own traces",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("nats", "", "NATS URL of a running mesh (default $SKEIN_NATS_URL; none: start an embedded mesh)")
	root.PersistentFlags().String("config", "", "agent config file (default ./agent.yaml if present)")
	root.AddCommand(
		newInitCmd(), newUpCmd(), newRunCmd(), newTraceCmd(),
	)
	for _, extra := range extraCommands {
		root.AddCommand(extra())
	}
	if err := root.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "skein:", err)
		os.Exit(1)
	}
}

// extraCommands lets each area's command file register its commands without touching main.
var extraCommands []func() *cobra.Command
