package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func init() { extraCommands = append(extraCommands, newCancelCmd) }

func newCancelCmd() *cobra.Command {
	var reason string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel [--reason TEXT] SESSION",
		Short: "Cancel a session and its child agent sessions",
		Long: "cancel stops SESSION wherever its work is: model calls are aborted, running tools are killed,\n" +
			"queued steps never start and child agent sessions are cancelled too; the session ends with\n" +
			"outcome cancelled and its trace names who cancelled it. Cancelling a session that has ended\n" +
			"changes nothing and says so (exit status 0).",
		Args: idArg(protocol.IDSession),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withBus(cmd, func(env meshEnv) error {
				if err := sessionKnown(cmd.Context(), env, args[0]); err != nil {
					return err
				}
				rep, err := cancelSession(cmd.Context(), env.conn, env.names, args[0], cliUser(), reason)
				if err != nil {
					return err
				}
				if err := rep.Err(); err != nil {
					return wireExit(err, "skein: "+err.Error())
				}
				w := cmd.OutOrStdout()
				if asJSON {
					return json.NewEncoder(w).Encode(rep)
				}
				switch rep.Status {
				case protocol.CancelStatusAlreadyFinished:
					fmt.Fprintf(w, "session %s had already ended (%s); nothing to cancel\n", rep.SessionID, rep.Outcome)
				case protocol.CancelStatusAlreadyCancelled:
					fmt.Fprintf(w, "session %s was already cancelled\n", rep.SessionID)
				default:
					fmt.Fprintf(w, "cancelling session %s", rep.SessionID)
					if len(rep.Children) > 0 {
						fmt.Fprintf(w, " and %d child session(s): %v", len(rep.Children), rep.Children)
					}
					fmt.Fprintln(w)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, written to the session's trace")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the reply as one JSON object: session_id, status, outcome, no_op, children")
	return cmd
}

// cancelSession asks the gateway to cancel a session. With no gateway answering (a CLI on an
// embedded server that runs no services) it cancels through the records directly, which is
// the same code the gateway runs.
func cancelSession(ctx context.Context, conn *bus.Conn, names protocol.Names, id, by, reason string) (protocol.CancelReply, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	req := protocol.CancelRequest{SessionID: id, By: by, Reason: reason}
	var rep protocol.CancelReply
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	data, err := protocol.Marshal(&req)
	if err != nil {
		return rep, err
	}
	tctx, tcancel := context.WithTimeout(cctx, 5*time.Second)
	msg, err := conn.NC.RequestWithContext(tctx, names.Cancel(), data)
	tcancel()
	switch {
	case err == nil:
		return rep, protocol.Unmarshal(msg.Data, &rep)
	case !errors.Is(err, nats.ErrNoResponders):
		// Cancelling is idempotent: asking again is safe.
		return rep, bus.Request(cctx, conn.NC, names.Cancel(), &req, &rep, 5*time.Second)
	}
	g, gerr := gateway.New(cctx, gateway.Deps{Conn: conn, Names: names, Logger: meshLogger()})
	if gerr != nil {
		return rep, gerr
	}
	rep, err = g.Cancel(cctx, req)
	if err != nil {
		rep.Fail(protocol.Wrap(gateway.ErrorCode(err), err))
	}
	rep.SessionID = id
	return rep, nil
}

// cliUser names the user cancelling from this machine, for the trace.
func cliUser() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("cli %s@%s", name, host)
}
