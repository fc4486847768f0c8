package planner

import (
	"context"
	"fmt"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// skillWait bounds the planner's question to memoryd: planning goes on without a skill rather
// than wait for one.
const skillWait = 3 * time.Second

// skillFor asks memoryd for the mature skill that fits the task (nil when memory or skills are
// off, none fits, or memoryd does not answer in time: the trace says so).
func (p *Planner) skillFor(ctx context.Context, t protocol.Task) *protocol.Recalled {
	m := p.d.Config.Memory
	if !m.Enabled || !m.Skills.Enabled || !m.Skills.Show {
		return nil
	}
	agent := t.Agent
	if agent == p.d.Config.Agent.Name {
		agent = p.d.Config.MemoryAgent()
	}
	rctx, cancel := context.WithTimeout(ctx, skillWait)
	defer cancel()
	var rep protocol.RetrieveReply
	req := protocol.RetrieveRequest{Agent: agent, Task: t.Task, Skills: 1, TopK: 1, SessionID: t.SessionID, ExampleBudget: m.Cases.ExampleBudget}
	if err := bus.Request(rctx, p.d.Conn.NC, p.d.Names.Memory(protocol.MemRetrieve), &req, &rep, skillWait); err != nil {
		p.emit(protocol.Event{SessionID: t.SessionID, Type: protocol.EvDecision, Agent: t.Agent, Role: protocol.RolePlanner,
			Text: "planning without skills: " + err.Error()})
		return nil
	}
	if rep.Error != "" || len(rep.Skills) == 0 {
		return nil
	}
	k := rep.Skills[0]
	return &k
}

// skillTemplate is what the planning model reads of a skill: the procedure, and how to use it.
func skillTemplate(k protocol.Recalled) string {
	return fmt.Sprintf("A proven procedure for tasks like this one (from %d successful runs):\n%s\n"+
		"Use it as the template of the plan: keep its order, adapt each step to this task, leave out what does not apply.",
		k.Skill.Confirmed, retrieve.RenderSkill(k))
}
