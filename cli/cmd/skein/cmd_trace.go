package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
	"github.com/skein-mesh/skein/pkg/trace"
)

func newTraceCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "trace", Short: "Read session traces from the TRACE stream"}
	cmd.AddCommand(newTraceListCmd(), newTraceShowCmd(), newTraceTailCmd(), newTraceTreeCmd())
	return cmd
}

func newTraceListCmd() *cobra.Command {
	var since time.Duration
	var asJSON bool
	list := &cobra.Command{
		Use: "list", Short: "List sessions with their outcome", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBus(cmd, func(env meshEnv) error {
				sessions, err := trace.List(cmd.Context(), env.conn.JS, env.names, since)
				if err != nil {
					return err
				}
				if asJSON {
					out := make([]traceListItem, 0, len(sessions))
					for _, s := range sessions {
						out = append(out, traceListItem{SessionID: s.SessionID, Agent: s.Agent, Task: s.Task, Outcome: string(s.Outcome),
							Started: s.Started, Events: s.Events})
					}
					return writeJSON(cmd.OutOrStdout(), out)
				}
				printSessions(cmd.OutOrStdout(), sessions)
				return nil
			})
		},
	}
	list.Flags().DurationVar(&since, "since", 0, "only sessions with events newer than this (e.g. 24h)")
	list.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {session_id, agent, task, outcome, started, events}")
	return list
}

func printSessions(w io.Writer, sessions []trace.SessionSummary) {
	if len(sessions) == 0 {
		fmt.Fprintln(w, "no sessions in the trace stream")
	}
	for _, s := range sessions {
		outcome := string(s.Outcome)
		if outcome == "" {
			outcome = "(running)"
		}
		fmt.Fprintf(w, "%s  %s  %-28s %-12s %3d events  %s\n", s.Started.Local().Format("2006-01-02 15:04:05"),
			s.SessionID, outcome, s.Agent, s.Events, clipTask(s.Task))
	}
}

func newTraceShowCmd() *cobra.Command {
	var asJSON bool
	show := &cobra.Command{
		Use: "show SESSION", Short: "Print a session's trace", Args: idArg(protocol.IDSession),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withBus(cmd, func(env meshEnv) error {
				events, err := trace.Read(cmd.Context(), env.conn.JS, env.names, args[0])
				if err != nil {
					return err
				}
				if len(events) == 0 {
					return fail(protocol.ExitNotFound, "no trace for session %s", args[0])
				}
				for _, ev := range events {
					printEvent(cmd, ev, asJSON)
				}
				return nil
			})
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	return show
}

func newTraceTailCmd() *cobra.Command {
	var follow, asJSON bool
	tail := &cobra.Command{
		Use: "tail SESSION", Short: "Follow a session's trace until it ends (or forever with -f)", Args: idArg(protocol.IDSession),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withBus(cmd, func(env meshEnv) error {
				if err := sessionKnown(cmd.Context(), env, args[0]); err != nil {
					return err
				}
				return trace.Follow(cmd.Context(), env.conn.JS, env.names, args[0], func(ev protocol.Event) bool {
					printEvent(cmd, ev, asJSON)
					return follow || ev.Type != protocol.EvUsage
				})
			})
		},
	}
	tail.Flags().BoolVarP(&follow, "follow", "f", false, "keep following after the session ends")
	tail.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	return tail
}

func newTraceTreeCmd() *cobra.Command {
	var asJSON bool
	tree := &cobra.Command{
		Use: "tree SESSION", Short: "Show a session with its steps and child agent sessions, as a tree", Args: idArg(protocol.IDSession),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withBus(cmd, func(env meshEnv) error {
				n, err := sessionTree(cmd.Context(), env.conn, env.names, args[0])
				if err != nil {
					return err // no trace: not found
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), n)
				}
				trace.PrintTree(cmd.OutOrStdout(), n)
				return nil
			})
		},
	}
	tree.Flags().BoolVar(&asJSON, "json", false, "print the tree as one JSON object (docs/json.md)")
	return tree
}

// traceListItem is one element of `skein trace list --json`.
type traceListItem struct {
	SessionID string    `json:"session_id"`
	Agent     string    `json:"agent"`
	Task      string    `json:"task"`
	Outcome   string    `json:"outcome"` // "" while running
	Started   time.Time `json:"started"`
	Events    int       `json:"events"`
}

// sessionTree reads a session tree, taking each session's children from its record.
func sessionTree(ctx context.Context, conn *bus.Conn, names protocol.Names, id string) (*trace.TreeNode, error) {
	records, err := session.Open(ctx, conn.JS, names)
	if err != nil {
		return nil, err
	}
	return trace.Tree(ctx, conn.JS, names, id, func(s string) []string { return records.Children(ctx, s) })
}

func printEvent(cmd *cobra.Command, ev protocol.Event, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(ev)
		fmt.Fprintln(cmd.OutOrStdout(), string(b))
		return
	}
	fmt.Fprintln(cmd.OutOrStdout(), trace.Line(ev))
}

func clipTask(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// sessionKnown refuses to follow a session the mesh has never heard of: neither the sessions
// bucket nor the trace stream knows it, so following would wait forever in silence.
func sessionKnown(ctx context.Context, env meshEnv, id string) error {
	if err := checkID(protocol.IDSession, id); err != nil {
		return err
	}
	if records, err := session.Open(ctx, env.conn.JS, env.names); err == nil {
		if _, err := records.Get(ctx, id); err == nil || errors.Is(err, session.ErrUnreadable) {
			return nil
		}
	}
	s, err := env.conn.JS.Stream(ctx, env.names.Stream(protocol.StreamTrace))
	if err != nil {
		return fmt.Errorf("trace stream: %w", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(env.names.Trace(id)))
	if err != nil {
		return fmt.Errorf("trace stream: %w", err)
	}
	if info.State.Subjects[env.names.Trace(id)] > 0 {
		return nil
	}
	return fail(protocol.ExitNotFound, "no session %s: it is not in the sessions bucket and has no trace events (see `skein trace list`)", id)
}
