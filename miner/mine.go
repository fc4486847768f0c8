package miner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
	"github.com/skein-mesh/skein/pkg/trace"
)

// Session is what mining needs from one session's trace.
type Session struct {
	ID    string
	Agent string
	// Memory is the memory the session's steps used ("": the agent's own).
	Memory  string
	Task    string
	Outcome protocol.Outcome
	// Ended is true once the usage event (always last) was seen.
	Ended bool
	Calls []Call
	// Offered is the tools the session's steps were offered (tools events).
	Offered   []string
	Retrieved []protocol.Guideline
	// Report is the usage report the session ended with; MinerCalls are earlier mining calls.
	Report     *protocol.UsageReport
	MinerCalls []ModelCall
	// Closed is true when the miner already closed the trace (its mined and usage events).
	Closed bool
	// Plan is the session's plan (nil: one step); Steps the steps that ran, in start order.
	Plan  []protocol.PlanStep
	Steps []StepRun
	// Previous is the conversation turn this session continued ("" for a first turn).
	Previous string
	// Recalled are the cases and skills the session was shown.
	Recalled []protocol.Recalled
	// Parent is the session whose agent-tool call started this one ("" for a root session).
	Parent string
}

// StepRun is one step as the trace shows it.
type StepRun struct {
	ID, Instruction, Answer string
	Outcome                 protocol.Outcome
	Turns                   int
}

// ModelCall is one model call's model and tokens.
type ModelCall struct {
	Model string
	Usage protocol.Usage
}

// Call is one tool call and its normalized result.
type Call struct {
	Step   string
	Tool   string
	Args   json.RawMessage
	Result protocol.ToolResult
}

// MemoryAgent is the memory the session learns into: the one its steps used.
func (s Session) MemoryAgent() string {
	if s.Memory != "" {
		return s.Memory
	}
	return s.Agent
}

// Failed reports whether the call failed.
func (c Call) Failed() bool { return !c.Result.OK }

// ParseSession folds a session's events. Events the miner itself wrote are ignored.
func ParseSession(session string, events []protocol.Event) Session {
	s := Session{ID: session}
	seen := map[string]bool{}
	for _, ev := range events {
		if ev.Role == protocol.RoleMiner {
			if ev.Type == protocol.EvModelCall && ev.Usage != nil {
				s.MinerCalls = append(s.MinerCalls, ModelCall{Model: ev.Model, Usage: *ev.Usage})
			}
			if ev.Type == protocol.EvUsage {
				s.Closed = true
			}
			continue
		}
		if s.Agent == "" && ev.Agent != "" {
			s.Agent = ev.Agent
		}
		switch ev.Type {
		case protocol.EvSessionStarted:
			if ev.Agent != "" {
				s.Agent = ev.Agent
			}
			s.Task = ev.Task
			if p := ev.Attrs["parent"]; protocol.IDSession.Valid(p) {
				s.Parent = p
			}
		case protocol.EvStepStarted:
			if m := ev.Attrs[protocol.AttrMemory]; m != "" && protocol.IDAgent.Valid(m) {
				s.Memory = m
			}
			if !slices.ContainsFunc(s.Steps, func(r StepRun) bool { return r.ID == ev.StepID }) {
				s.Steps = append(s.Steps, StepRun{ID: ev.StepID, Instruction: ev.Text})
			}
		case protocol.EvToolCall:
			if ev.Result == nil || ev.Tool == "" {
				continue
			}
			// Traces written by this version are redacted already; older ones and other
			// writers may not be, and what is mined here becomes prompt text.
			trace.Scrub(&ev)
			s.Calls = append(s.Calls, Call{Step: ev.StepID, Tool: ev.Tool, Args: ev.Args, Result: *ev.Result})
		case protocol.EvTools:
			for _, t := range ev.Tools {
				if t != "" && !slices.Contains(s.Offered, t) {
					s.Offered = append(s.Offered, t)
				}
			}
		case protocol.EvRetrieval:
			for _, g := range ev.Guidelines {
				if !seen[g.ID] {
					seen[g.ID] = true
					s.Retrieved = append(s.Retrieved, g)
				}
			}
			for _, x := range ev.Recalled {
				if !seen[x.ID] {
					seen[x.ID] = true
					s.Recalled = append(s.Recalled, x)
				}
			}
		case protocol.EvPlan:
			s.Plan = ev.Plan
		case protocol.EvStepFinished:
			for i := range s.Steps {
				if s.Steps[i].ID == ev.StepID {
					s.Steps[i].Answer, s.Steps[i].Outcome, s.Steps[i].Turns = ev.Text, ev.Outcome, ev.Turn
				}
			}
		case protocol.EvDecision:
			if p := ev.Attrs["previous"]; p != "" && protocol.IDSession.Valid(p) {
				s.Previous = p
			}
		case protocol.EvUsage:
			s.Ended = true
			if ev.Report != nil {
				r := *ev.Report
				s.Report = &r
			}
		}
		if ev.Type.Terminal() && ev.Outcome != "" {
			s.Outcome = ev.Outcome
		}
		if s.Task == "" && ev.Task != "" {
			s.Task = ev.Task
		}
	}
	return s
}

// Scope is the tools the session offered or called: what its lessons may speak of.
func (s Session) Scope() []string {
	out := slices.Clone(s.Offered)
	for _, c := range s.Calls {
		if !slices.Contains(out, c.Tool) {
			out = append(out, c.Tool)
		}
	}
	if out == nil {
		out = []string{}
	}
	return out
}

// Seen is the hosts and mail domains the session's task and tool arguments named: the
// addresses its lessons may name.
func (s Session) Seen() []string {
	var b strings.Builder
	b.WriteString(s.Task)
	for _, c := range s.Calls {
		b.WriteByte('\n')
		b.Write(c.Args)
	}
	out := gate.Hosts(b.String())
	if out == nil {
		out = []string{}
	}
	return out
}

// Evidence is one mined candidate before compression: the facts a model (or the template) turns
// into a guideline.
type Evidence struct {
	Key      string
	Polarity protocol.Polarity
	Tools    []string
	Task     string
	// Failure facts.
	Tool, Kind, Error, Stderr, Args string
	Recovery                        string
	// Success facts: the tools in the order they first succeeded, with example arguments.
	Steps []string
}

var (
	digitsRE  = regexp.MustCompile(`\d+`)
	hexRE     = regexp.MustCompile(`\b[0-9a-f]{8,}\b`)
	genericRE = regexp.MustCompile(`(?i)^\s*((tool|process|command)\s+)?(exited|exit status|exit code|failed|error)(\s+(with\s+)?(code|status)?\s*-?\d+)?\.?\s*$`)
)

// normalizeError folds an error message so the same failure with different counters or ids
// yields one candidate per session.
func normalizeError(s string) string {
	s = strings.ToLower(strings.Join(strings.Fields(s), " "))
	s = hexRE.ReplaceAllString(s, "#")
	s = digitsRE.ReplaceAllString(s, "N")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// stderrTail keeps the last lines of stderr, which is where tools print the actual cause.
func stderrTail(s string, lines, chars int) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	ls := strings.Split(s, "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	out := strings.TrimSpace(strings.Join(ls, "\n"))
	if len(out) > chars {
		out = strings.ToValidUTF8(out[len(out)-chars:], "")
	}
	return out
}

// realError is the most specific message a failed call left: the tool's own error, unless it
// is a generic "exited 1", in which case the last stderr line says more.
func realError(r protocol.ToolResult) string {
	e := strings.TrimSpace(r.Error)
	last := stderrTail(r.Stderr, 1, 300)
	if e == "" || genericRE.MatchString(e) {
		if last != "" {
			if e != "" {
				return last + " (" + e + ")"
			}
			return last
		}
	}
	if e == "" {
		e = r.Kind
	}
	return e
}

func compact(raw json.RawMessage, max int) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		s := string(raw)
		if len(s) > max {
			s = s[:max] + "…"
		}
		return s
	}
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "…"
	}
	return s
}

func hashKey(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:6])
}

// Mine returns the session's candidates: one per distinct (tool, error kind, normalized error)
// failure, and one success pattern when the session succeeded using tools.
func Mine(s Session) []Evidence {
	var out []Evidence
	seen := map[string]bool{}
	for i, c := range s.Calls {
		// The executor's built-ins (find_tools, read_result, finish) are how a step got its tools,
		// read its results and ended, not lessons about the agent's tools; a call the session's
		// cancel or budget stopped says nothing about the tool either.
		if !c.Failed() || protocol.Builtin(c.Tool) || c.Result.Kind == protocol.ToolErrCancelled || c.Result.Kind == protocol.ToolErrBudget {
			continue
		}
		msg := realError(c.Result)
		kind := c.Result.Kind
		if kind == "" {
			kind = protocol.ToolErrToolError
		}
		key := "fail:" + c.Tool + ":" + kind + ":" + hashKey(normalizeError(msg))
		if seen[key] {
			continue
		}
		seen[key] = true
		ev := Evidence{Key: key, Polarity: protocol.PolarityAvoid, Tools: []string{c.Tool}, Task: s.Task,
			Tool: c.Tool, Kind: kind, Error: msg, Stderr: stderrTail(c.Result.Stderr, 5, 400), Args: compact(c.Args, 200)}
		// What worked afterwards is the most useful half of a failure lesson.
		for _, later := range s.Calls[i+1:] {
			if later.Failed() {
				continue
			}
			if later.Tool == c.Tool {
				ev.Recovery = fmt.Sprintf("%s succeeded with %s", later.Tool, compact(later.Args, 120))
				break
			}
			if ev.Recovery == "" {
				ev.Recovery = fmt.Sprintf("%s then succeeded with %s", later.Tool, compact(later.Args, 120))
			}
		}
		out = append(out, ev)
	}
	if s.Outcome.Succeeded() {
		var tools, steps []string
		for _, c := range s.Calls {
			if c.Failed() || slices.Contains(tools, c.Tool) || protocol.Builtin(c.Tool) {
				continue
			}
			tools = append(tools, c.Tool)
			steps = append(steps, fmt.Sprintf("%s %s", c.Tool, compact(c.Args, 120)))
		}
		if len(tools) > 0 {
			out = append(out, Evidence{Key: "pattern:" + strings.Join(tools, ">"), Polarity: protocol.PolarityPattern,
				Tools: tools, Task: s.Task, Steps: steps})
		}
	}
	return out
}

// Prompt is the evidence as the compressing model reads it.
func (e Evidence) Prompt() string {
	var b strings.Builder
	if e.Polarity == protocol.PolarityAvoid {
		fmt.Fprintf(&b, "A tool call failed.\nTask: %s\nTool: %s\nFailure kind: %s\nArguments: %s\nError: %s\n",
			clip(e.Task, 300), e.Tool, e.Kind, e.Args, e.Error)
		if e.Stderr != "" {
			fmt.Fprintf(&b, "Stderr (tail):\n%s\n", e.Stderr)
		}
		if e.Recovery != "" {
			fmt.Fprintf(&b, "Afterwards: %s\n", e.Recovery)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "The run succeeded.\nTask: %s\nTools used, in order:\n", clip(e.Task, 300))
	for _, s := range e.Steps {
		fmt.Fprintf(&b, "- %s\n", s)
	}
	return b.String()
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// Template is the deterministic guideline used when no model is configured (and when a model
// answers nothing usable). It keeps the tool's real error, cut to fit maxTokens.
func (e Evidence) Template(maxTokens int) string {
	var text string
	if e.Polarity == protocol.PolarityAvoid {
		errPart, _ := tokenize.Truncate(clip(e.Error, 200), max(6, maxTokens/2))
		text = fmt.Sprintf("Check inputs before calling %s: it failed with %q", e.Tool, errPart)
		if e.Args != "" && e.Args != "{}" {
			text = fmt.Sprintf("Avoid calling %s with %s: it failed with %q", e.Tool, clip(e.Args, 80), errPart)
		}
	} else {
		task, _ := tokenize.Truncate(clip(e.Task, 120), 8)
		text = fmt.Sprintf("For tasks like %q, use %s.", task, strings.Join(e.Tools, ", then "))
	}
	return capTokens(text, maxTokens)
}

// capTokens cuts text at a word boundary to maxTokens.
func capTokens(text string, maxTokens int) string {
	out, cut := tokenize.Truncate(text, maxTokens)
	if cut {
		out = strings.TrimRight(out, " ,;:-\"'(")
	}
	return out
}
