package cases

import (
	"slices"
	"strings"

	"github.com/skein-mesh/skein/pkg/memory/extract"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Step is one plan step of a session as the trace shows it.
type Step struct {
	ID          string
	Instruction string
	DependsOn   []string
	Calls       []extract.Call
	Answer      string
	Outcome     protocol.Outcome
}

// Split finds the episode boundaries of one session's plan: steps joined by a dependency serve
// one task (a step that combines other steps' results joins them into one episode), steps with
// no path between them are separate tasks. It returns the episodes' step groups in plan order.
func Split(steps []Step) [][]Step {
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		if p, ok := parent[x]; ok && p != x {
			r := find(p)
			parent[x] = r
			return r
		}
		return x
	}
	for _, s := range steps {
		parent[s.ID] = s.ID
	}
	for _, s := range steps {
		for _, d := range s.DependsOn {
			if _, ok := parent[d]; ok {
				parent[find(s.ID)] = find(d)
			}
		}
	}
	var order []string
	groups := map[string][]Step{}
	for _, s := range steps {
		r := find(s.ID)
		if _, ok := groups[r]; !ok {
			order = append(order, r)
		}
		groups[r] = append(groups[r], s)
	}
	out := make([][]Step, 0, len(order))
	for _, r := range order {
		out = append(out, groups[r])
	}
	return out
}

// Continues decides a conversation's boundary between an episode and the next turn: the turn
// carries the episode on when it is a short follow-up (at most followUpWords words: a
// correction, a "now do the same for ...") that calls no tool the episode has not called, or
// calls none. A longer message, or one that turns to other tools, opens a new episode. The rule
// reads only structure, so it holds in every language.
func Continues(ep extract.Trajectory, next extract.Turn) bool {
	if len(strings.Fields(next.Task)) > followUpWords {
		return false
	}
	called := ep.Called()
	for _, c := range next.Calls {
		if !slices.Contains(called, c.Tool) {
			return false
		}
	}
	return true
}

const followUpWords = 12

// Worst is the worse of two outcomes, as a plan's steps combine into its session's.
func Worst(a, b protocol.Outcome) protocol.Outcome {
	if rank[b] > rank[a] {
		return b
	}
	return a
}

var rank = map[protocol.Outcome]int{
	protocol.OutcomeSuccess: 0, protocol.OutcomeSuccessWithRecovery: 1, protocol.OutcomeIncomplete: 2,
	protocol.OutcomeIncompleteToolFail: 3, protocol.OutcomeNotAccomplished: 4, protocol.OutcomeBudgetExceeded: 5,
	protocol.OutcomeCancelled: 6, protocol.OutcomeFailed: 7,
}
