package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

func newTraceCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "trace", Short: "Read session traces from the TRACE stream"}
	var since time.Duration
	list := &cobra.Command{
		Use: "list", Short: "List sessions with their outcome", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBus(cmd, func(env meshEnv) error {
				sessions, err := trace.List(cmd.Context(), env.conn.JS, env.names, since)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
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
				return nil
			})
		},
	}
	list.Flags().DurationVar(&since, "since", 0, "only sessions with events newer than this (e.g. 24h)")

	var asJSON bool
	show := &cobra.Command{
		Use: "show SESSION", Short: "Print a session's trace", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withBus(cmd, func(env meshEnv) error {
				events, err := trace.Read(cmd.Context(), env.conn.JS, env.names, args[0])
				if err != nil {
					return err
				}
				if len(events) == 0 {
					return &exitError{code: 1, msg: fmt.Sprintf("skein: no trace for session %s", args[0])}
				}
				for _, ev := range events {
					printEvent(cmd, ev, asJSON)
				}
				return nil
			})
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")

	var follow bool
	tail := &cobra.Command{
		Use: "tail SESSION", Short: "Follow a session's trace until it ends (or forever with -f)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withBus(cmd, func(env meshEnv) error {
				return trace.Follow(cmd.Context(), env.conn.JS, env.names, args[0], func(ev protocol.Event) bool {
					printEvent(cmd, ev, asJSON)
					return follow || ev.Type != protocol.EvUsage
				})
			})
		},
	}
	tail.Flags().BoolVarP(&follow, "follow", "f", false, "keep following after the session ends")
	tail.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	cmd.AddCommand(list, show, tail)
	return cmd
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
