package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/pkg/trace"
)

// evalTaskResult is one task in one round.
type evalTaskResult struct {
	ID           string           `json:"id"`
	Session      string           `json:"session"`
	Outcome      protocol.Outcome `json:"outcome"`
	Passed       bool             `json:"passed"`
	FirstTry     bool             `json:"first_try"`
	ToolFailures int              `json:"tool_failures"`
	InputTokens  int64            `json:"input_tokens"`
	OutputTokens int64            `json:"output_tokens"`
	CostUSD      float64          `json:"cost_usd"`
	WallS        float64          `json:"wall_s"`
	// Shown is what memory showed the session: guidelines, worked examples, skills.
	Guidelines int `json:"guidelines"`
	Examples   int `json:"examples"`
	Skills     int `json:"skills"`
	// MiningInputTokens and MiningOutputTokens are what learning from the session cost.
	MiningInputTokens  int64  `json:"mining_input_tokens"`
	MiningOutputTokens int64  `json:"mining_output_tokens"`
	Why                string `json:"why,omitempty"`
}

// evalRound is one round of an arm, summed over its tasks.
type evalRound struct {
	Round        int     `json:"round"`
	Tasks        int     `json:"tasks"`
	Succeeded    int     `json:"succeeded"`
	FirstTry     int     `json:"first_try"`
	SuccessRate  float64 `json:"success_rate"`
	FirstTryRate float64 `json:"first_try_rate"`
	ToolFailures int     `json:"tool_failures"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	// CostKnown is false when a model's price is unknown (its calls count 0 in CostUSD).
	CostKnown bool    `json:"cost_known"`
	WallS     float64 `json:"wall_s"`
	// MiningInputTokens and MiningOutputTokens are what learning from the round cost (the
	// miner's model), apart from the agent's own tokens.
	MiningInputTokens  int64            `json:"mining_input_tokens"`
	MiningOutputTokens int64            `json:"mining_output_tokens"`
	Results            []evalTaskResult `json:"results"`
}

// evalArm is the suite's rounds with memory on or off.
type evalArm struct {
	Memory string      `json:"memory"` // "on" or "off"
	Rounds []evalRound `json:"rounds"`
}

// evalRunner runs a suite's tasks on one embedded mesh.
type evalRunner struct {
	suite *evalSuite
	conn  *bus.Conn
	// checks runs the checking tools, as a toolhost runs a tool.
	checks   tools.Runner
	names    protocol.Names
	agent    string
	memoryOn bool // memoryd serves the mesh and the miner mines: wait for each session's mining
	progress io.Writer
}

// round runs every task once, one after the other (each session's mining is done before the next
// starts, so a task learns from the ones before it as a user's next task would).
func (r *evalRunner) round(ctx context.Context, n int) (evalRound, error) {
	out := evalRound{Round: n, Tasks: len(r.suite.Tasks), CostKnown: true}
	start := time.Now()
	for _, t := range r.suite.Tasks {
		res, known, err := r.task(ctx, t)
		if err != nil {
			return out, fmt.Errorf("round %d, task %s: %w", n, t.ID, err)
		}
		out.Results = append(out.Results, res)
		if res.Passed {
			out.Succeeded++
		}
		if res.FirstTry {
			out.FirstTry++
		}
		out.ToolFailures += res.ToolFailures
		out.InputTokens += res.InputTokens
		out.OutputTokens += res.OutputTokens
		out.CostUSD += res.CostUSD
		out.CostKnown = out.CostKnown && known
		if r.progress != nil {
			mark := "fail"
			switch {
			case res.FirstTry:
				mark = "ok, first try"
			case res.Passed:
				mark = "ok, recovered"
			}
			fmt.Fprintf(r.progress, "  round %d  %-20s %-14s %s\n", n, t.ID, mark, res.Why)
		}
	}
	for _, res := range out.Results {
		out.MiningInputTokens += res.MiningInputTokens
		out.MiningOutputTokens += res.MiningOutputTokens
	}
	out.WallS = time.Since(start).Seconds()
	if out.Tasks > 0 {
		out.SuccessRate = float64(out.Succeeded) / float64(out.Tasks)
		out.FirstTryRate = float64(out.FirstTry) / float64(out.Tasks)
	}
	return out, nil
}

// task runs one task as a session, waits for its end (and its mining when memory is on), and
// checks it.
func (r *evalRunner) task(ctx context.Context, t evalTask) (evalTaskResult, bool, error) {
	res := evalTaskResult{ID: t.ID, Session: gateway.NewSessionID()}
	timeout := 10 * time.Minute
	if t.TimeoutS > 0 {
		timeout = time.Duration(t.TimeoutS * float64(time.Second))
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rep protocol.SubmitReply
	if err := bus.Request(tctx, r.conn.NC, r.names.Submit(), &protocol.SubmitRequest{SessionID: res.Session, Agent: r.agent, Task: t.Task, Caller: "eval"}, &rep, submitTry); err != nil {
		return res, false, fmt.Errorf("submit: %w", err)
	}
	if rep.Error != "" {
		return res, false, errors.New("submit: " + rep.Error)
	}
	var answer string
	known, ended := true, false
	followCtx, stop := context.WithCancel(tctx)
	defer stop()
	err := trace.Follow(followCtx, r.conn.JS, r.names, res.Session, func(ev protocol.Event) bool {
		switch {
		case ev.Type.Terminal():
			res.Outcome, answer = ev.Outcome, ev.Text
			if ev.Reason != "" {
				res.Why = ev.Reason
			}
		case ev.Type == protocol.EvToolCall && ev.Result != nil && !ev.Result.OK && !protocol.Builtin(ev.Tool):
			res.ToolFailures++
		case ev.Type == protocol.EvRetrieval:
			res.Guidelines += len(ev.Guidelines)
			for _, x := range ev.Recalled {
				if x.Kind == protocol.KindSkill {
					res.Skills++
				} else {
					res.Examples++
				}
			}
		case ev.Type == protocol.EvUsage && ev.Role == protocol.RoleMiner:
			if ev.Report != nil {
				m := ev.Report.ByRole[protocol.RoleMiner]
				res.MiningInputTokens, res.MiningOutputTokens = m.InputTokens+m.CacheReadInputTokens+m.CacheCreationInputTokens, m.OutputTokens
			}
			return false
		case ev.Type == protocol.EvUsage && !ended:
			ended = true
			if rp := ev.Report; rp != nil {
				res.InputTokens = rp.InputTokens + rp.CacheReadInputTokens + rp.CacheCreationInputTokens
				res.OutputTokens, res.WallS = rp.OutputTokens, rp.WallTimeS
				if rp.CostUSD != nil {
					res.CostUSD = *rp.CostUSD
				} else {
					known = false
				}
			}
			if res.Outcome == "" {
				res.Outcome = ev.Outcome
			}
			if !r.memoryOn {
				return false
			}
			// Learning must be in memory before the next task: wait for the miner, not forever.
			time.AfterFunc(2*time.Minute, stop)
		}
		return true
	})
	if !ended {
		if err == nil {
			err = tctx.Err()
		}
		return res, known, fmt.Errorf("session %s did not end: %v", res.Session, err)
	}
	res.Passed, res.Why = r.check(tctx, t, res, answer)
	res.FirstTry = res.Passed && res.ToolFailures == 0
	return res, known, nil
}

// check applies the task's check to a session that ended: it must have succeeded, and its answer
// match (or the checking tool pass it).
func (r *evalRunner) check(ctx context.Context, t evalTask, res evalTaskResult, answer string) (bool, string) {
	if !res.Outcome.Succeeded() {
		why := "ended " + string(res.Outcome)
		if res.Why != "" {
			why += ": " + clipText(res.Why, 100)
		}
		return false, why
	}
	if t.Check.re != nil {
		if t.Check.re.MatchString(answer) {
			return true, ""
		}
		return false, fmt.Sprintf("answer %q does not match %s", clipText(answer, 80), t.Check.Answer)
	}
	args := map[string]any{}
	for k, v := range t.Check.Args {
		args[k] = v
	}
	args["answer"], args["session"] = answer, res.Session
	raw, err := json.Marshal(args)
	if err != nil {
		return false, "check arguments: " + err.Error()
	}
	rep := r.checks.Run(ctx, t.Check.tool, raw)
	if !rep.OK {
		return false, fmt.Sprintf("checking tool %s failed: %s", t.Check.Tool, rep.Error)
	}
	var verdict struct {
		Pass   bool   `json:"pass"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(rep.Result, &verdict); err != nil {
		return false, fmt.Sprintf("checking tool %s answered %s, not {\"pass\": bool}", t.Check.Tool, clipText(string(rep.Result), 80))
	}
	return verdict.Pass, verdict.Reason
}

// evalConfig is the suite's config for one arm: memory (and so mining) on or off, and the
// checking tools kept from the agent (only tools.enabled is offered to it).
func evalConfig(base *config.Config, memoryOn bool) *config.Config {
	c := *base
	c.Memory.Enabled = memoryOn
	c.Miner.Enabled = memoryOn
	return &c
}

func pct(x float64) string { return fmt.Sprintf("%3.0f%%", 100*x) }

// printEval writes the learning curve, memory off and on side by side.
func printEval(w io.Writer, s *evalSuite, model string, arms []evalArm) {
	fmt.Fprintf(w, "suite %s: %d tasks, model %s\n", s.Name, len(s.Tasks), model)
	byMem := map[string]evalArm{}
	var order []string
	rounds := 0
	for _, a := range arms {
		byMem[a.Memory] = a
		order = append(order, a.Memory)
		rounds = max(rounds, len(a.Rounds))
	}
	metrics := []struct {
		name string
		f    func(evalRound) string
	}{
		{"success", func(r evalRound) string { return pct(r.SuccessRate) }},
		{"first-try", func(r evalRound) string { return pct(r.FirstTryRate) }},
		{"tool fails", func(r evalRound) string { return fmt.Sprint(r.ToolFailures) }},
		{"input tok", func(r evalRound) string { return fmt.Sprint(r.InputTokens) }},
		{"output tok", func(r evalRound) string { return fmt.Sprint(r.OutputTokens) }},
		{"cost $", func(r evalRound) string {
			if !r.CostKnown {
				return "?"
			}
			return fmt.Sprintf("%.4f", r.CostUSD)
		}},
		{"wall s", func(r evalRound) string { return fmt.Sprintf("%.1f", r.WallS) }},
	}
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	head, sub := "round", "memory"
	for _, m := range metrics {
		for i, o := range order {
			if i == 0 {
				head += "\t" + m.name
			} else {
				head += "\t"
			}
			sub += "\t" + o
		}
	}
	fmt.Fprintln(tw, head)
	fmt.Fprintln(tw, sub)
	for i := range rounds {
		line := fmt.Sprint(i + 1)
		for _, m := range metrics {
			for _, o := range order {
				if a := byMem[o]; i < len(a.Rounds) {
					line += "\t" + m.f(a.Rounds[i])
				} else {
					line += "\t-"
				}
			}
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
	// A metric's memory-on column has an empty header cell, which tabwriter pads: trim it.
	for line := range strings.Lines(table.String()) {
		fmt.Fprintln(w, strings.TrimRight(line, " \n"))
	}
	if a, ok := byMem["on"]; ok && len(a.Rounds) > 0 {
		var in, out int64
		for _, r := range a.Rounds {
			in += r.MiningInputTokens
			out += r.MiningOutputTokens
		}
		fmt.Fprintf(w, "learning (the miner's model, memory on): %d input, %d output tokens over %d rounds\n", in, out, len(a.Rounds))
	}
}
