package trace

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/usage"
)

// TreeUsage is a node's token counts (the shape of protocol.Usage in JSON).
type TreeUsage = protocol.Usage

// StepNode is one step of a session in `skein trace tree`.
type StepNode struct {
	StepID    string           `json:"step_id"`
	Outcome   protocol.Outcome `json:"outcome,omitempty"`
	Reason    string           `json:"reason,omitempty"`
	Turns     int              `json:"turns"`
	ToolCalls int              `json:"tool_calls"`
	Usage     TreeUsage        `json:"usage"`
	CostUSD   *float64         `json:"cost_usd"`
	WallTimeS float64          `json:"wall_time_s"`
}

// TreeNode is one session of a session tree: its steps and its child agent sessions. This is the
// stable JSON shape of `skein trace tree --json` and `GET /v1/sessions/{id}/tree` (docs/json.md).
type TreeNode struct {
	SessionID string           `json:"session_id"`
	Agent     string           `json:"agent,omitempty"`
	Task      string           `json:"task,omitempty"`
	Outcome   protocol.Outcome `json:"outcome,omitempty"` // "" while running
	Reason    string           `json:"reason,omitempty"`
	Turns     int              `json:"turns"`
	ToolCalls int              `json:"tool_calls"`
	// Usage and CostUSD are this session's own model calls (executor and planner); a child's are
	// in the child's node. CostUSD is null when a model is unpriced.
	Usage     TreeUsage   `json:"usage"`
	CostUSD   *float64    `json:"cost_usd"`
	WallTimeS float64     `json:"wall_time_s"`
	Steps     []StepNode  `json:"steps"`
	Children  []*TreeNode `json:"children"`
	// Previous is the conversation turn this session continues; ForkedFrom, the turn a forked
	// conversation's first session continues (then Previous is empty).
	Previous   string `json:"previous,omitempty"`
	ForkedFrom string `json:"forked_from,omitempty"`
}

// maxTreeNodes bounds how many sessions one tree reads.
const maxTreeNodes = 500

// Tree reads a session's trace and its children's, recursively. children, when not nil, lists a
// session's child sessions from its record; the trace's own references (agent tool results) are
// added to them, so a tree can be drawn from the trace alone.
func Tree(ctx context.Context, js jetstream.JetStream, names protocol.Names, root string, children func(string) []string) (*TreeNode, error) {
	seen := map[string]bool{}
	var build func(id string) (*TreeNode, error)
	build = func(id string) (*TreeNode, error) {
		seen[id] = true
		evs, err := Read(ctx, js, names, id)
		if err != nil {
			return nil, err
		}
		n, kids := node(id, evs)
		if children != nil {
			for _, c := range children(id) {
				if !slices.Contains(kids, c) {
					kids = append(kids, c)
				}
			}
		}
		for _, c := range kids {
			if seen[c] || len(seen) >= maxTreeNodes || !protocol.IDSession.Valid(c) {
				continue // a child named in a tool's result may be anything
			}
			child, err := build(c)
			if err != nil {
				return nil, err
			}
			n.Children = append(n.Children, child)
		}
		return n, nil
	}
	n, err := build(root)
	if err != nil {
		return nil, err
	}
	if n.Agent == "" && len(n.Steps) == 0 {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no trace for session %s", root)
	}
	return n, nil
}

// node folds one session's events; it returns the child sessions its trace names, in order.
func node(id string, evs []protocol.Event) (*TreeNode, []string) {
	n := &TreeNode{SessionID: id, Steps: []StepNode{}, Children: []*TreeNode{}}
	acc := usage.NewAccumulator(nil)
	steps := map[string]*StepNode{}
	stepAcc := map[string]*usage.Accumulator{}
	started := map[string]float64{}
	var order, kids []string
	var first, last float64
	step := func(sid string) *StepNode {
		if s, ok := steps[sid]; ok {
			return s
		}
		steps[sid] = &StepNode{StepID: sid}
		stepAcc[sid] = usage.NewAccumulator(nil)
		order = append(order, sid)
		return steps[sid]
	}
	for _, ev := range evs {
		t := float64(ev.Time.UnixNano()) / 1e9
		if first == 0 || t < first {
			first = t
		}
		if t > last {
			last = t
		}
		switch ev.Type {
		case protocol.EvSessionStarted:
			n.Agent, n.Task = ev.Agent, ev.Task
			n.Previous, n.ForkedFrom = ev.Attrs[protocol.AttrPrevious], ev.Attrs[protocol.AttrForkedFrom]
		case protocol.EvStepStarted:
			step(ev.StepID)
			started[ev.StepID] = t
		case protocol.EvModelCall:
			if ev.Role == protocol.RoleSubagent {
				if c := ev.Attrs["child_session"]; c != "" && !slices.Contains(kids, c) {
					kids = append(kids, c)
				}
				continue // counted in the child's node
			}
			if ev.Usage == nil || ev.Role == protocol.RoleMiner {
				continue
			}
			acc.Add(ev.Model, ev.Role, ev.Attrs["cache_ttl"], *ev.Usage)
			if ev.StepID != "" {
				step(ev.StepID)
				stepAcc[ev.StepID].Add(ev.Model, ev.Role, ev.Attrs["cache_ttl"], *ev.Usage)
			}
		case protocol.EvToolCall:
			n.ToolCalls++
			if ev.StepID != "" {
				step(ev.StepID).ToolCalls++
			}
			if ev.Result != nil && len(ev.Result.Result) > 0 {
				var child struct {
					SessionID string `json:"session_id"`
				}
				if json.Unmarshal(ev.Result.Result, &child) == nil && child.SessionID != "" && !slices.Contains(kids, child.SessionID) {
					kids = append(kids, child.SessionID)
				}
			}
		case protocol.EvStepFinished:
			s := step(ev.StepID)
			s.Outcome, s.Reason, s.Turns = ev.Outcome, ev.Reason, ev.Turn
			if st, ok := started[ev.StepID]; ok {
				s.WallTimeS = round3(t - st)
			}
			n.Turns += ev.Turn
		case protocol.EvFinal, protocol.EvIncomplete, protocol.EvFailed:
			n.Outcome, n.Reason = ev.Outcome, ev.Reason
		case protocol.EvUsage:
			if ev.Role != protocol.RoleMiner && ev.Report != nil {
				n.WallTimeS = round3(ev.Report.WallTimeS)
			}
		}
	}
	r := acc.Report()
	n.Usage, n.CostUSD = r.Usage, r.CostUSD
	if n.WallTimeS == 0 && last > first {
		n.WallTimeS = round3(last - first)
	}
	for _, sid := range order {
		s := steps[sid]
		sr := stepAcc[sid].Report()
		s.Usage, s.CostUSD = sr.Usage, sr.CostUSD
		n.Steps = append(n.Steps, *s)
	}
	return n, kids
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// PrintTree draws a tree as indented text.
func PrintTree(w io.Writer, n *TreeNode) {
	printNode(w, n, "", "")
}

func printNode(w io.Writer, n *TreeNode, first, rest string) {
	outcome := string(n.Outcome)
	if outcome == "" {
		outcome = "(running)"
	}
	lineage := ""
	switch {
	case n.ForkedFrom != "":
		lineage = " · forked from " + n.ForkedFrom
	case n.Previous != "":
		lineage = " · continues " + n.Previous
	}
	fmt.Fprintf(w, "%s%s %s %s · %d turn(s) · %d tool call(s) · in %d / out %d tokens · %s · %.1fs%s  %q\n", first, n.SessionID, n.Agent, outcome,
		n.Turns, n.ToolCalls, inputTokens(n.Usage), n.Usage.OutputTokens, Cost(n.CostUSD), n.WallTimeS, lineage, clip(n.Task, 60))
	total := len(n.Steps) + len(n.Children)
	i := 0
	for _, s := range n.Steps {
		i++
		branch := "├─ "
		if i == total {
			branch = "└─ "
		}
		line := fmt.Sprintf("step %s %s · %d turn(s) · %d tool call(s) · in %d / out %d tokens · %s · %.1fs", s.StepID, s.Outcome, s.Turns,
			s.ToolCalls, inputTokens(s.Usage), s.Usage.OutputTokens, Cost(s.CostUSD), s.WallTimeS)
		if s.Reason != "" && !strings.HasPrefix(string(s.Outcome), "success") {
			line += " · " + clip(s.Reason, 80)
		}
		fmt.Fprintln(w, rest+branch+line)
	}
	for _, c := range n.Children {
		i++
		branch, cont := "├─ ", "│  "
		if i == total {
			branch, cont = "└─ ", "   "
		}
		printNode(w, c, rest+branch, rest+cont)
	}
}

// inputTokens is everything billed as input.
func inputTokens(u protocol.Usage) int64 {
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}
