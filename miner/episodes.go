package miner

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/memory/cases"
	"github.com/skein-mesh/skein/pkg/memory/extract"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// maxConversationTurns bounds how far back the miner reads a conversation for the episode its
// latest turn continues.
const maxConversationTurns = 8

// episodeKey names the episode of a plain session or a conversation: the case of a
// conversation's episode is keyed by its first turn, so each later turn that carries the episode
// on rewrites the same case.
const episodeKey = "episode"

// earlierTurns reads the conversation turns before s, oldest first (at most
// maxConversationTurns; a turn whose trace cannot be read ends the walk).
func earlierTurns(ctx context.Context, js jetstream.JetStream, names protocol.Names, s Session) []Session {
	var out []Session
	prev := s.Previous
	for len(out) < maxConversationTurns && prev != "" {
		events, err := trace.Read(ctx, js, names, prev)
		if err != nil || len(events) == 0 {
			break
		}
		p := ParseSession(prev, events)
		out = append([]Session{p}, out...)
		prev = p.Previous
	}
	return out
}

// extractCalls is the session's calls as extractors read them: the executor's built-ins and
// calls that a cancel or a budget stopped are left out, as the guideline miner leaves them.
func extractCalls(calls []Call) []extract.Call {
	var out []extract.Call
	for _, c := range calls {
		if protocol.Builtin(c.Tool) || c.Result.Kind == protocol.ToolErrCancelled || c.Result.Kind == protocol.ToolErrBudget {
			continue
		}
		x := extract.Call{Tool: c.Tool, Args: compact(c.Args, 200), OK: !c.Failed()}
		if x.OK {
			x.Result = compact(c.Result.Result, 160)
		} else {
			x.Error = realError(c.Result)
		}
		out = append(out, x)
	}
	return out
}

func (s Session) answer() string {
	var parts []string
	for _, st := range s.Steps {
		if a := strings.TrimSpace(st.Answer); a != "" {
			parts = append(parts, a)
		}
	}
	return clip(strings.Join(parts, " "), 400)
}

func (s Session) turn() extract.Turn {
	return extract.Turn{Task: s.Task, Calls: extractCalls(s.Calls), Answer: s.answer()}
}

// cost is what a session's report says it cost.
func cost(reps ...*protocol.UsageReport) protocol.CaseCost {
	var c protocol.CaseCost
	for _, r := range reps {
		if r == nil {
			continue
		}
		c.InputTokens += r.InputTokens + r.CacheReadInputTokens + r.CacheCreationInputTokens
		c.OutputTokens += r.OutputTokens
		if r.CostUSD != nil {
			c.USD += *r.CostUSD
		}
		c.Turns += r.Steps
		c.WallS += r.WallTimeS
	}
	return c
}

func countCalls(c *protocol.CaseCost, calls []extract.Call) {
	c.ToolCalls, c.ToolFailures = len(calls), 0
	for _, x := range calls {
		if !x.OK {
			c.ToolFailures++
		}
	}
}

// Episodes finds the tasks one session (with the conversation turns before it, oldest first)
// holds, and returns one episode each:
//
//   - a plan whose steps fall into groups with no dependency between them holds one task per
//     group (cases.Split); its session's cost is shared out by the groups' tool calls;
//   - otherwise the session is one task, which the turns before it carry on while each next turn
//     is a short follow-up on the same tools (cases.Continues): the episode then spans those
//     turns, keyed by the first, and ends as this turn ended.
func Episodes(s Session, earlier []Session) []cases.Episode {
	if len(s.Plan) > 1 {
		if eps := planEpisodes(s); len(eps) > 1 {
			return eps
		}
	}
	turns := []extract.Turn{s.turn()}
	sessions := []string{s.ID}
	reps := []*protocol.UsageReport{s.Report}
	for i := len(earlier) - 1; i >= 0; i-- {
		e := earlier[i]
		if !cases.Continues(extract.Trajectory{Turns: []extract.Turn{e.turn()}}, turns[0]) {
			break
		}
		turns = append([]extract.Turn{e.turn()}, turns...)
		sessions = append([]string{e.ID}, sessions...)
		reps = append(reps, e.Report)
	}
	ep := cases.Episode{Key: episodeKey, Traj: extract.Trajectory{Turns: turns, Outcome: s.Outcome}, Cost: cost(reps...)}
	countCalls(&ep.Cost, ep.Traj.Calls())
	if len(sessions) > 1 {
		ep.Sessions = sessions
	}
	return []cases.Episode{ep}
}

// planEpisodes is one episode per group of connected plan steps.
func planEpisodes(s Session) []cases.Episode {
	runs := map[string]StepRun{}
	for _, r := range s.Steps {
		runs[r.ID] = r
	}
	var steps []cases.Step
	for _, p := range s.Plan {
		var calls []Call
		for _, c := range s.Calls {
			if c.Step == p.StepID {
				calls = append(calls, c)
			}
		}
		r := runs[p.StepID]
		out := r.Outcome
		if out == "" {
			out = p.Outcome
		}
		steps = append(steps, cases.Step{ID: p.StepID, Instruction: p.Instruction, DependsOn: p.DependsOn,
			Calls: extractCalls(calls), Answer: r.Answer, Outcome: out})
	}
	groups := cases.Split(steps)
	total := cost(s.Report)
	all := len(extractCalls(s.Calls))
	var eps []cases.Episode
	for _, g := range groups {
		var ids, parts []string
		var calls []extract.Call
		var answer string
		outcome := protocol.OutcomeSuccess
		for _, st := range g {
			ids = append(ids, st.ID)
			parts = append(parts, st.Instruction)
			calls = append(calls, st.Calls...)
			answer = st.Answer
			if st.Outcome != "" {
				outcome = cases.Worst(outcome, st.Outcome)
			}
		}
		task := strings.Join(parts, "; then ")
		if task == "" {
			task = s.Task
		}
		ep := cases.Episode{Key: "plan:" + strings.Join(ids, "+"),
			Traj: extract.Trajectory{Turns: []extract.Turn{{Task: task, Calls: calls, Answer: answer}}, Outcome: outcome}}
		if all > 0 {
			share := float64(len(calls)) / float64(all)
			ep.Cost = protocol.CaseCost{InputTokens: int64(float64(total.InputTokens) * share), OutputTokens: int64(float64(total.OutputTokens) * share),
				USD: total.USD * share, WallS: total.WallS * share, Turns: total.Turns}
		}
		countCalls(&ep.Cost, calls)
		eps = append(eps, ep)
	}
	return eps
}

// distil turns the session's episodes into cases: each episode is filtered in code first
// (cases.Skip), then distilled by the miner's model when there is one, its answer checked in
// code (cases.Extract). A case once distilled is kept in the mined bucket, so mining the session
// again offers memoryd the same case and spends no tokens.
func (c *compressor) distil(ctx context.Context, s Session) (out []protocol.CaseCandidate, skipped []string) {
	m := c.d.Config.Memory.Cases
	if !m.Enabled {
		return nil, nil
	}
	var earlier []Session
	if s.Previous != "" {
		earlier = earlierTurns(ctx, c.d.Conn.JS, c.d.Names, s)
	}
	opt := cases.Options{MinCalls: m.MinCalls}
	for _, ep := range Episodes(s, earlier) {
		if why := cases.Skip(ep, opt); why != "" {
			skipped = append(skipped, ep.Key+": "+why)
			continue
		}
		if len(out) == protocol.MaxCasesPerRequest {
			skipped = append(skipped, ep.Key+": more episodes than one request carries")
			continue
		}
		out = append(out, protocol.CaseCandidate{Key: ep.Key, Sessions: ep.Sessions, Tools: ep.Traj.Called(),
			Source: protocol.SourceMiner, Case: c.caseOf(ctx, ep, opt)})
	}
	return out, skipped
}

func (c *compressor) caseOf(ctx context.Context, ep cases.Episode, opt cases.Options) protocol.CaseBody {
	key := "case." + c.s.ID + "." + hashKey(ep.Key)
	kv := c.kv(ctx)
	if kv != nil {
		if e, err := kv.Get(ctx, key); err == nil {
			var b protocol.CaseBody
			if json.Unmarshal(e.Value(), &b) == nil {
				return b
			}
		}
	}
	b, refusal := cases.Extract(ctx, ep, c.extractor(), opt, c.d.Logger.With("session", c.s.ID))
	if kv != nil && (refusal == nil || refusal.Code != extract.RefusedModel) {
		// A model that failed is asked again next time; an answer refused for what it said is not.
		if data, err := json.Marshal(b); err == nil {
			if _, err := kv.Put(ctx, key, data); err != nil {
				c.d.Logger.Warn("cache distilled case", "err", err)
			}
		}
	}
	return b
}

// shareCases writes a sub-agent's successful cases to the memory of the agent that called it,
// when the sub-agent shares its findings (memory.share_with_parent, as its registration in the
// agents bucket says): tagged subagent, with the sub-agent and its session, through the same
// ingest (and lesson gate) as any case.
func shareCases(ctx context.Context, d Deps, s Session, cs []protocol.CaseCandidate) ([]protocol.IngestAction, error) {
	if s.Parent == "" || len(cs) == 0 {
		return nil, nil
	}
	var shared []protocol.CaseCandidate
	for _, c := range cs {
		if c.Case.Succeeded() {
			c.Source, c.SourceAgent = protocol.SourceSubagent, s.Agent
			shared = append(shared, c)
		}
	}
	if len(shared) == 0 {
		return nil, nil
	}
	kv, err := bus.KV(ctx, d.Conn.JS, d.Names, protocol.BucketAgents)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, s.Agent)
	if err != nil {
		if bus.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	var spec protocol.AgentSpec
	if err := protocol.Unmarshal(e.Value(), &spec); err != nil || spec.Share == nil {
		return nil, err
	}
	events, err := trace.Read(ctx, d.Conn.JS, d.Names, s.Parent)
	if err != nil || len(events) == 0 {
		return nil, err
	}
	parent := ParseSession(s.Parent, events)
	agent := parent.MemoryAgent()
	if agent == "" {
		return nil, nil
	}
	var rep protocol.IngestReply
	req := protocol.IngestRequest{Agent: agent, SessionID: s.ID, Cases: shared, Scope: s.Scope(), Seen: s.Seen()}
	if err := bus.Request(ctx, d.Conn.NC, d.Names.Memory(protocol.MemIngest), &req, &rep, 30*time.Second); err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return rep.Actions, errors.New(rep.Error)
	}
	return rep.Actions, nil
}
