package main

import (
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func init() { extraCommands = append(extraCommands, newDLQCmd) }

func newDLQCmd() *cobra.Command {
	var since time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "dlq [--since DURATION]",
		Short: "List dead letters: tasks, steps and results that exhausted their deliveries",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBus(cmd, func(env meshEnv) error {
				letters, err := readDeadLetters(cmd, env, since)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), letters)
				}
				printDeadLetters(cmd.OutOrStdout(), letters)
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only dead letters newer than this (e.g. 24h)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {time, subject, stream, sequence, consumer, deliveries, reason, bytes}")
	return cmd
}

// readDeadLetters reads the dead-letter stream from since ago (0: all of it), oldest first.
func readDeadLetters(cmd *cobra.Command, env meshEnv, since time.Duration) ([]dlqItem, error) {
	letters := []dlqItem{}
	err := bus.ReadStream(cmd.Context(), env.conn.JS, env.names.Stream(protocol.StreamDLQ), env.names.DLQAll(), readFrom(since),
		func(m *jetstream.RawStreamMsg) bool {
			h := m.Header
			letters = append(letters, dlqItem{Time: m.Time.UTC(), Subject: h.Get(bus.HeaderDLQSubject), Stream: h.Get(bus.HeaderDLQStream),
				Sequence: h.Get(bus.HeaderDLQSequence), Consumer: h.Get(bus.HeaderDLQConsumer), Deliveries: h.Get(bus.HeaderDLQDeliveries),
				Reason: h.Get(bus.HeaderDLQReason), Bytes: len(m.Data)})
			return true
		})
	if err != nil {
		return nil, fmt.Errorf("dlq stream: %w", err)
	}
	return letters, nil
}

func printDeadLetters(w io.Writer, letters []dlqItem) {
	if len(letters) == 0 {
		fmt.Fprintln(w, "no dead letters")
	}
	for _, l := range letters {
		fmt.Fprintf(w, "%s  %s (stream %s seq %s, consumer %s, %s deliveries)  %d bytes\n", l.Time.Local().Format("2006-01-02 15:04:05"),
			l.Subject, l.Stream, l.Sequence, l.Consumer, l.Deliveries, l.Bytes)
		if l.Reason != "" {
			fmt.Fprintf(w, "    reason: %s\n", l.Reason)
		}
	}
}

// dlqItem is one element of `skein dlq --json`: where the dead letter came from.
type dlqItem struct {
	Time       time.Time `json:"time"`
	Subject    string    `json:"subject"`
	Stream     string    `json:"stream"`
	Sequence   string    `json:"sequence"`
	Consumer   string    `json:"consumer"`
	Deliveries string    `json:"deliveries"`
	// Reason is why it was dead-lettered ("" when the producer gave none).
	Reason string `json:"reason"`
	Bytes  int    `json:"bytes"`
}
