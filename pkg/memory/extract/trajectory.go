package extract

import (
	"fmt"
	"slices"
	"strings"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

// Turn is one user message of an episode and what the agent did about it.
type Turn struct {
	// Task is the user's message (a session's task, or a plan step's instruction under it).
	Task  string
	Calls []Call
	// Answer is the agent's final text for the turn ("" when it gave none).
	Answer string
}

// Call is one tool call as extractors read it: the arguments compacted, the result's error or
// a clip of its value.
type Call struct {
	Tool   string
	Args   string
	OK     bool
	Error  string
	Result string
}

// Trajectory is one episode: its turns (one for a plain session; several for a conversation or
// a plan's steps) and how it ended.
type Trajectory struct {
	Turns   []Turn
	Outcome protocol.Outcome
}

// Task is the episode's first user message.
func (t Trajectory) Task() string {
	if len(t.Turns) == 0 {
		return ""
	}
	return t.Turns[0].Task
}

// Calls are every call of the episode, in order.
func (t Trajectory) Calls() []Call {
	var out []Call
	for _, tu := range t.Turns {
		out = append(out, tu.Calls...)
	}
	return out
}

// Called is the tools the episode called, in order of first call.
func (t Trajectory) Called() []string {
	var out []string
	for _, c := range t.Calls() {
		if !slices.Contains(out, c.Tool) {
			out = append(out, c.Tool)
		}
	}
	return out
}

// Failures counts the calls that failed.
func (t Trajectory) Failures() int {
	n := 0
	for _, c := range t.Calls() {
		if !c.OK {
			n++
		}
	}
	return n
}

// Render is the trajectory as a model reads it, cut to about maxTokens (0: whole). A quote the
// model gives back is checked against this text.
func (t Trajectory) Render(maxTokens int) string {
	var b strings.Builder
	for i, tu := range t.Turns {
		if len(t.Turns) > 1 {
			fmt.Fprintf(&b, "Turn %d\n", i+1)
		}
		fmt.Fprintf(&b, "User: %s\n", tu.Task)
		for j, c := range tu.Calls {
			fmt.Fprintf(&b, "Call %d: %s %s\n", j+1, c.Tool, c.Args)
			if c.OK {
				fmt.Fprintf(&b, "  ok: %s\n", c.Result)
			} else {
				fmt.Fprintf(&b, "  failed: %s\n", c.Error)
			}
		}
		if tu.Answer != "" {
			fmt.Fprintf(&b, "Answer: %s\n", tu.Answer)
		}
	}
	fmt.Fprintf(&b, "Outcome: %s\n", t.Outcome)
	s := b.String()
	if maxTokens > 0 {
		if cut, was := tokenize.Truncate(s, maxTokens); was {
			s = cut + "\n[trajectory cut]\n"
		}
	}
	return s
}
