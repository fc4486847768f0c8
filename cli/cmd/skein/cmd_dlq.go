package main

import (
	"fmt"
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
				ctx := cmd.Context()
				s, err := env.conn.JS.Stream(ctx, env.names.Stream(protocol.StreamDLQ))
				if err != nil {
					return fmt.Errorf("dlq stream: %w", err)
				}
				cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{env.names.DLQAll()}}
				if since > 0 {
					t := time.Now().Add(-since)
					cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
				}
				c, err := s.OrderedConsumer(ctx, cfg)
				if err != nil {
					return fmt.Errorf("dlq: %w", err)
				}
				info, err := c.Info(ctx)
				if err != nil {
					return fmt.Errorf("dlq: %w", err)
				}
				w := cmd.OutOrStdout()
				letters := []dlqItem{}
				if info.NumPending == 0 && !asJSON {
					fmt.Fprintln(w, "no dead letters")
					return nil
				}
				for pending := info.NumPending; pending > 0; {
					batch, err := c.Fetch(int(min(pending, 500)), jetstream.FetchMaxWait(2*time.Second))
					if err != nil {
						return fmt.Errorf("dlq: %w", err)
					}
					n := 0
					for msg := range batch.Messages() {
						n++
						h := msg.Headers()
						meta, _ := msg.Metadata()
						when := ""
						if meta != nil {
							when = meta.Timestamp.Local().Format("2006-01-02 15:04:05")
						}
						if asJSON {
							it := dlqItem{Subject: h.Get(bus.HeaderDLQSubject), Stream: h.Get(bus.HeaderDLQStream), Sequence: h.Get(bus.HeaderDLQSequence),
								Consumer: h.Get(bus.HeaderDLQConsumer), Deliveries: h.Get(bus.HeaderDLQDeliveries), Reason: h.Get(bus.HeaderDLQReason),
								Bytes: len(msg.Data())}
							if meta != nil {
								it.Time = meta.Timestamp.UTC()
							}
							letters = append(letters, it)
							continue
						}
						fmt.Fprintf(w, "%s  %s (stream %s seq %s, consumer %s, %s deliveries)  %d bytes\n", when,
							h.Get(bus.HeaderDLQSubject), h.Get(bus.HeaderDLQStream), h.Get(bus.HeaderDLQSequence),
							h.Get(bus.HeaderDLQConsumer), h.Get(bus.HeaderDLQDeliveries), len(msg.Data()))
						if r := h.Get(bus.HeaderDLQReason); r != "" {
							fmt.Fprintf(w, "    reason: %s\n", r)
						}
					}
					if n == 0 {
						break
					}
					pending -= uint64(n)
				}
				if asJSON {
					return writeJSON(w, letters)
				}
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only dead letters newer than this (e.g. 24h)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {time, subject, stream, sequence, consumer, deliveries, reason, bytes}")
	return cmd
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
