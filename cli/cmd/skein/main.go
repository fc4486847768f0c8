// Command skein is the mesh's command line: it scaffolds projects, runs tasks (on an embedded
// mesh by default), runs the mesh or some of its roles in one process, and reads traces, memory
// and usage.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/harden"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/service"
)

// exitError carries a specific exit status (one of protocol's Exit* classes) out of a command.
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

// fail is an exitError of class code saying "skein: " and what went wrong.
func fail(code int, format string, args ...any) *exitError {
	return &exitError{code: code, msg: "skein: " + fmt.Sprintf(format, args...)}
}

// configError is a config that cannot be used: the loader's message names the file, line and key.
func configError(err error) *exitError {
	return &exitError{code: protocol.ExitConfig, msg: err.Error()}
}

func main() {
	_ = harden.Process() // provider keys and credentials live in this process: see pkg/harden
	os.Exit(execute(context.Background(), newRoot(), os.Stderr))
}

// newRoot is the whole command tree.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "skein",
		Short:         "A local-first mesh of LLM agents that learn from their own traces",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		RunE:          runRoot,
	}
	root.Flags().Bool("version", false, "print the version and exit (with --json: one JSON object)")
	root.Flags().Bool("json", false, "with --version: print {version, commit, commit_time, modified, go}")
	root.PersistentFlags().String("nats", "", "NATS URL of a running mesh (default $SKEIN_NATS_URL, mesh.nats_url, then the mesh running on $SKEIN_HOME)")
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
	usageErrors(root)
	return root
}

// runRoot is `skein` with no command: --version, or the help.
func runRoot(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return unknownCommand(cmd, args[0])
	}
	if v, _ := cmd.Flags().GetBool("version"); v {
		asJSON, _ := cmd.Flags().GetBool("json")
		return printVersion(cmd.OutOrStdout(), asJSON)
	}
	return cmd.Help()
}

// execute runs the command line and returns the exit status, having said why on stderr.
func execute(ctx context.Context, root *cobra.Command, stderr io.Writer) int {
	err := root.ExecuteContext(ctx)
	if err == nil {
		return protocol.ExitOK
	}
	code, msg := exitStatus(err)
	if msg != "" {
		fmt.Fprintln(stderr, msg)
	}
	return code
}

// exitStatus classifies err into the CLI's exit statuses (docs/json.md, "Exit status"): a
// command's own class, a config error, the code an error from the mesh carries, or what the
// connection to the mesh says. What none of them claims is internal.
func exitStatus(err error) (int, string) {
	var ee *exitError
	var ce *config.Error
	var ces config.Errors
	var pe *protocol.Error
	var ae *bus.AuthError
	switch {
	case errors.As(err, &ee):
		return ee.code, ee.msg
	case errors.As(err, &ce), errors.As(err, &ces):
		return protocol.ExitConfig, err.Error()
	case errors.As(err, &pe):
		return pe.Code.ExitStatus(), "skein: " + err.Error()
	case errors.As(err, &ae):
		return protocol.ExitNoPerm, "skein: " + err.Error()
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed):
		return protocol.ExitUnavailable, "skein: " + err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return protocol.ExitTempFail, "skein: " + err.Error()
	case errors.Is(err, context.Canceled):
		return 130, "skein: interrupted"
	}
	return protocol.ExitInternal, "skein: " + err.Error()
}

// usageErrors makes every mistake on the command line exit ExitUsage: unknown flags, wrong
// arguments, and unknown commands under a group (`skein trace lsit`), which cobra would
// otherwise answer with the group's help and exit 0.
func usageErrors(c *cobra.Command) {
	c.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError(cmd, err) })
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return cmd.Help()
		}
	} else if validate := c.Args; validate != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			err := validate(cmd, args)
			var ee *exitError
			if err == nil || errors.As(err, &ee) { // a validator that classified its error itself (idArg)
				return err
			}
			return usageError(cmd, err)
		}
	}
	for _, sub := range c.Commands() {
		usageErrors(sub)
	}
}

func usageError(cmd *cobra.Command, err error) error {
	return &exitError{code: protocol.ExitUsage, msg: fmt.Sprintf("skein: %v\nsee `%s --help`", err, cmd.CommandPath())}
}

func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default, set only on its path
	}
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageError(cmd, errors.New(msg))
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
		return fail(protocol.ExitUsage, "%v", err)
	}
	fmt.Fprintf(os.Stderr, "skein: profiles at http://%s/debug/pprof/\n", at)
	return nil
}
