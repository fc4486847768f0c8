package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/usage"
)

func init() { extraCommands = append(extraCommands, newUsageCmd) }

func newUsageCmd() *cobra.Command {
	var since time.Duration
	var by string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "usage [--since DURATION] [--by agent|model|day]",
		Short: "Total tokens and cost across the mesh from the usage stream",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if by != "agent" && by != "model" && by != "day" {
				return usageError(cmd, errors.New("--by must be agent, model or day"))
			}
			return withBus(cmd, func(env meshEnv) error {
				reports, err := readUsage(cmd, env, since)
				if err != nil {
					return err
				}
				return printUsage(cmd, reports, by, asJSON)
			})
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only sessions that ended within this long (e.g. 24h); default all")
	cmd.Flags().StringVar(&by, "by", "agent", "group by agent, model or day")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object {by, rows: [...]} (docs/json.md)")
	return cmd
}

// sessionUsage is the last usage report of one session: a session's final report (written by the
// miner after mining) supersedes the planner's.
type sessionUsage struct {
	agent string
	day   string
	r     protocol.UsageReport
}

func readUsage(cmd *cobra.Command, env meshEnv, since time.Duration) (map[string]sessionUsage, error) {
	out := map[string]sessionUsage{}
	err := bus.ReadStream(cmd.Context(), env.conn.JS, env.names.Stream(protocol.StreamUsage), env.names.UsageAll(), readFrom(since),
		func(m *jetstream.RawStreamMsg) bool {
			var ev protocol.Event
			if protocol.Unmarshal(m.Data, &ev) == nil && ev.Report != nil {
				out[ev.SessionID] = sessionUsage{agent: ev.Agent, day: ev.Time.Local().Format("2006-01-02"), r: *ev.Report}
			}
			return true
		})
	if err != nil {
		return nil, fmt.Errorf("usage stream: %w", err)
	}
	return out, nil
}

// readFrom is where a listing with --since starts: since ago, or the stream's first message.
func readFrom(since time.Duration) bus.ReadFrom {
	if since <= 0 {
		return bus.ReadFrom{}
	}
	return bus.ReadFrom{Time: time.Now().Add(-since)}
}

// usageRow is one row of `skein usage --json`.
type usageRow struct {
	Key                      string  `json:"key"`
	Sessions                 *int    `json:"sessions"` // null when grouped by model
	InputTokens              int64   `json:"input_tokens"`
	OutputTokens             int64   `json:"output_tokens"`
	CacheCreationInputTokens int64   `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64   `json:"cache_read_input_tokens"`
	CostUSD                  float64 `json:"cost_usd"`
	// CostComplete is false when some usage was of unpriced models: cost_usd is then a floor.
	CostComplete bool `json:"cost_complete"`
}

// usageTotal is one group's sum: tokens, sessions (none when grouped by model) and cost, which
// is a floor when some of the usage was of unpriced models.
type usageTotal struct {
	u        protocol.Usage
	sessions int
	cost     float64
	unknown  bool
}

func (t *usageTotal) add(u protocol.Usage, cost *float64, session bool) {
	t.u = t.u.Add(u)
	if session {
		t.sessions++
	}
	if cost == nil {
		t.unknown = true
	} else {
		t.cost += *cost
	}
}

// groupUsage sums the sessions' reports by agent, day or model.
func groupUsage(reports map[string]sessionUsage, by string) map[string]*usageTotal {
	rows := map[string]*usageTotal{}
	add := func(key string, u protocol.Usage, cost *float64, session bool) {
		if rows[key] == nil {
			rows[key] = &usageTotal{}
		}
		rows[key].add(u, cost, session)
	}
	for _, s := range reports {
		switch by {
		case "agent":
			add(s.agent, s.r.Usage, s.r.CostUSD, true)
		case "day":
			add(s.day, s.r.Usage, s.r.CostUSD, true)
		case "model":
			for model, u := range s.r.ByModel {
				var c *float64
				if usd, known := usage.Cost(model, u, ""); known {
					c = &usd
				}
				add(model, u, c, false)
			}
		}
	}
	return rows
}

func printUsage(cmd *cobra.Command, reports map[string]sessionUsage, by string, asJSON bool) error {
	rows := groupUsage(reports, by)
	keys := slices.Sorted(maps.Keys(rows))
	if asJSON {
		return writeUsageJSON(cmd.OutOrStdout(), rows, keys, by)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "%s\tsessions\tinput\toutput\tcache write\tcache read\tcost\n", by)
	for _, k := range keys {
		r := rows[k]
		cost := fmt.Sprintf("$%.4f", r.cost)
		if r.unknown {
			cost += " + unknown"
		}
		sessions := fmt.Sprint(r.sessions)
		if by == "model" {
			sessions = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", k, sessions, r.u.InputTokens, r.u.OutputTokens,
			r.u.CacheCreationInputTokens, r.u.CacheReadInputTokens, cost)
	}
	if len(keys) == 0 {
		fmt.Fprintln(w, "(no usage recorded)")
	}
	return w.Flush()
}

func writeUsageJSON(w io.Writer, rows map[string]*usageTotal, keys []string, by string) error {
	out := struct {
		By   string     `json:"by"`
		Rows []usageRow `json:"rows"`
	}{By: by, Rows: []usageRow{}}
	for _, k := range keys {
		r := rows[k]
		row := usageRow{Key: k, InputTokens: r.u.InputTokens, OutputTokens: r.u.OutputTokens,
			CacheCreationInputTokens: r.u.CacheCreationInputTokens, CacheReadInputTokens: r.u.CacheReadInputTokens,
			CostUSD: r.cost, CostComplete: !r.unknown}
		if by != "model" {
			n := r.sessions
			row.Sessions = &n
		}
		out.Rows = append(out.Rows, row)
	}
	return writeJSON(w, out)
}
