package trace

import (
	"fmt"
	"strings"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Line renders an event as one human-readable log line: what happened, how long it took and
// what it cost, without dumping payloads.
func Line(ev protocol.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-15s", ev.Time.Format("15:04:05.000"), ev.Type)
	if ev.StepID != "" {
		fmt.Fprintf(&b, " [%s]", ev.StepID)
	}
	switch ev.Type {
	case protocol.EvSessionStarted:
		fmt.Fprintf(&b, " agent=%s task=%q", ev.Agent, clip(ev.Task, 120))
	case protocol.EvPlan:
		fmt.Fprintf(&b, " %d step(s)", len(ev.Plan))
		for _, s := range ev.Plan {
			if s.Instruction != "" {
				fmt.Fprintf(&b, " %s=%q", s.StepID, clip(s.Instruction, 60))
			}
		}
	case protocol.EvRetrieval:
		fmt.Fprintf(&b, " %d guideline(s)", len(ev.Guidelines))
		for _, g := range ev.Guidelines {
			fmt.Fprintf(&b, " %s:%s(%.2f)", g.Tier, g.ID, g.Score)
		}
	case protocol.EvModelCall:
		fmt.Fprintf(&b, " role=%s model=%s %dms stop=%s", ev.Role, ev.Model, ev.LatencyMS, ev.StopReason)
		if u := ev.Usage; u != nil {
			fmt.Fprintf(&b, " in=%d out=%d cache_w=%d cache_r=%d", u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens)
		}
	case protocol.EvThought:
		fmt.Fprintf(&b, " %q", clip(ev.Text, 160))
	case protocol.EvToolCall:
		fmt.Fprintf(&b, " %s %s %dms", ev.Tool, clip(string(ev.Args), 100), ev.LatencyMS)
		if r := ev.Result; r != nil {
			if r.OK {
				fmt.Fprintf(&b, " ok %s", clip(string(r.Result), 100))
			} else {
				fmt.Fprintf(&b, " FAILED %s: %s", r.Kind, clip(r.Error, 160))
			}
		}
	case protocol.EvToolAttempt:
		fmt.Fprintf(&b, " %s call=%s", ev.Tool, ev.CallID)
	case protocol.EvCompaction:
		fmt.Fprintf(&b, " saved %d tokens: %s", ev.TokensSaved, ev.Reason)
	case protocol.EvTools:
		fmt.Fprintf(&b, " [%s]", strings.Join(ev.Tools, " "))
		if ev.Reason != "" {
			fmt.Fprintf(&b, " reason=%q", clip(ev.Reason, 160))
		}
	case protocol.EvCancel, protocol.EvBudget:
		if ev.Reason != "" {
			fmt.Fprintf(&b, " %q", clip(ev.Reason, 160))
		}
	case protocol.EvDecision, protocol.EvStepStarted:
		if ev.Text != "" {
			fmt.Fprintf(&b, " %s", clip(ev.Text, 160))
		}
	case protocol.EvStepFinished, protocol.EvFinal, protocol.EvIncomplete, protocol.EvFailed:
		fmt.Fprintf(&b, " outcome=%s", ev.Outcome)
		if ev.Reason != "" {
			fmt.Fprintf(&b, " reason=%q", clip(ev.Reason, 160))
		}
		if ev.Text != "" {
			fmt.Fprintf(&b, " text=%q", clip(ev.Text, 160))
		}
	case protocol.EvUsage:
		if r := ev.Report; r != nil {
			fmt.Fprintf(&b, " in=%d out=%d cache_w=%d cache_r=%d calls=%d turns=%d wall=%.2fs cost=%s",
				r.InputTokens, r.OutputTokens, r.CacheCreationInputTokens, r.CacheReadInputTokens,
				r.Calls, r.TurnCount(), r.WallTimeS, Cost(r.CostUSD))
		}
	}
	for k, v := range ev.Attrs {
		fmt.Fprintf(&b, " %s=%s", k, clip(v, 80))
	}
	return b.String()
}

// Cost renders a cost that may be unknown.
func Cost(usd *float64) string {
	if usd == nil {
		return "unknown"
	}
	return fmt.Sprintf("$%.6f", *usd)
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && (s[cut]&0xC0) == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}
