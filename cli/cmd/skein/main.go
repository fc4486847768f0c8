// Command skein is the mesh's command line: it scaffolds projects, runs tasks (on an embedded
// mesh by default), runs the whole mesh in one process, and reads traces, memory and usage.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/harden"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/service"
)

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// wireExit is the exit of a command that failed with err, an error that came over the wire (or
// bus.Request's own): msg on stderr and the exit status of err's code (protocol.Code.ExitStatus),
// so a script tells "fix the input" (65) from "try again" (75) and "start the mesh" (69).
func wireExit(err error, msg string) error {
	return &exitError{code: protocol.CodeOf(err).ExitStatus(), msg: msg}
}

func main() {
	_ = harden.Process() // provider keys and credentials live in this process: see pkg/harden
	root := &cobra.Command{
		Use:           "skein",
		Short:         "A local-first mesh of LLM agents that learn from their own traces",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("nats", "", "NATS URL of a running mesh (default $SKEIN_NATS_URL; none: start an embedded mesh)")
	root.PersistentFlags().StringArray("config", nil, "agent config file (default ./agent.yaml if present); run and up take it more than once, one agent per file, and run talks to the first")
	root.PersistentFlags().String("creds", "", "NATS credentials file for --nats (default $SKEIN_CREDS, mesh.creds_file, then $SKEIN_HOME/creds/client.nk, admin.nk for memory import/evict/migrate)")
	root.PersistentFlags().String("pprof", "", "serve runtime profiles (/debug/pprof/) of this process on this address, e.g. 127.0.0.1:6060 (default off)")
	root.PersistentPreRunE = startPprof
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
		} else {
			fmt.Fprintln(os.Stderr, "skein:", err)
		}
		os.Exit(exitStatus(err))
	}
}

// exitStatus is the one place an error becomes an exit status: an exitError's own, else a coded
// error's (every error that came over the wire, and the CLI's own checks) by its code's status,
// else 1.
func exitStatus(err error) int {
	var (
		ee    *exitError
		coded *protocol.Error
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &coded):
		return coded.Code.ExitStatus()
	}
	return 1
}

// idArg takes exactly one argument, an identifier of kind k: a malformed or too long one is
// refused before anything is dialled or started for it (it would end up in a subject or a key),
// with its code's exit status.
func idArg(k protocol.ID) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(1)(cmd, args); err != nil {
			return err
		}
		return checkID(k, args[0])
	}
}

// checkID refuses s unless it is an identifier of kind k ("" passes: a flag left unset).
func checkID(k protocol.ID, s string) error {
	if s == "" {
		return nil
	}
	if err := k.Check(s); err != nil {
		return &exitError{code: protocol.CodeOf(err).ExitStatus(), msg: "skein: " + err.Error()}
	}
	return nil
}

// extraCommands lets each area's command file register its commands without touching main.
var extraCommands []func() *cobra.Command

// startPprof serves this process's profiles when --pprof is set; in `skein up` and an embedded
// `skein run` they are labelled by role (see embeddedMesh.labeled).
func startPprof(cmd *cobra.Command, _ []string) error {
	addr, _ := cmd.Flags().GetString("pprof")
	if addr == "" {
		return nil
	}
	at, err := service.ServePprof(cmd.Context(), addr, nil)
	if err != nil {
		return &exitError{code: 2, msg: "skein: " + err.Error()}
	}
	fmt.Fprintf(os.Stderr, "skein: profiles at http://%s/debug/pprof/\n", at)
	return nil
}
