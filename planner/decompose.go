package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Planner modes (planner.mode in agent.yaml).
const (
	ModeOff   = "off"
	ModeAuto  = "auto"
	ModeForce = "force"
)

// defaultMaxItems bounds a plan when planner.max_items is unset.
const defaultMaxItems = 8

// SystemMarker starts the planner's system prompt, so scripted models and trace readers can tell
// a planning call from an executor's.
const SystemMarker = "skein-planner:"

// singleStep is the plan of a task that is not decomposed: one step carrying the whole task.
func singleStep() []protocol.PlanStep {
	return []protocol.PlanStep{{StepID: "s1", Status: protocol.StepPending}}
}

// plannerPrompt is the system prompt of a planning call. Both modes ask for the same JSON; auto
// also lets the model decline to split.
func plannerPrompt(mode string, maxItems int) string {
	var b strings.Builder
	b.WriteString(SystemMarker)
	b.WriteString(" you plan work for an agent. Split the user's task into steps that executors run.\n")
	if mode == ModeAuto {
		b.WriteString("First decide whether splitting helps. If the task is simple, or its parts cannot be done " +
			"separately, answer with exactly one step whose instruction is the whole task.\n")
	} else {
		b.WriteString("Always answer with a plan; use one step only when the task has no separable parts.\n")
	}
	fmt.Fprintf(&b, `Rules:
- At most %d steps.
- Every step sees the original task, its own instruction and the results of the steps it depends on, nothing else.
- Steps whose dependencies are finished run at the same time, so list a dependency only when a step needs that result.
- depends_on may name only steps listed before it.
- The final answer is made of the results of the steps no other step depends on; end with one step that writes the answer when several parts must be combined.
- ids are short tokens of letters, digits, '-' or '_' (s1, s2, ...), unique within the plan.
Answer with one JSON object and nothing else:
{"steps":[{"id":"s1","instruction":"...","depends_on":[]},{"id":"s2","instruction":"...","depends_on":["s1"]}]}`, maxItems)
	return b.String()
}

// planDoc is the JSON a planning model answers with.
type planDoc struct {
	Steps []struct {
		ID          string   `json:"id"`
		Instruction string   `json:"instruction"`
		DependsOn   []string `json:"depends_on"`
	} `json:"steps"`
}

// parsePlan checks a model's plan strictly. Only a Markdown code fence around the object is
// forgiven, since models add one even when told not to.
func parsePlan(text string, maxItems int) ([]protocol.PlanStep, error) {
	body := strings.TrimSpace(text)
	if strings.HasPrefix(body, "```") {
		body = strings.TrimPrefix(body, "```")
		if nl := strings.IndexByte(body, '\n'); nl >= 0 && !strings.ContainsAny(body[:nl], "{") {
			body = body[nl+1:] // the fence's language tag
		}
		body = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(body), "```"))
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var doc planDoc
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("plan is not the JSON object asked for: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("plan has text after its JSON object")
	}
	switch {
	case len(doc.Steps) == 0:
		return nil, errors.New("plan has no steps")
	case len(doc.Steps) > maxItems:
		return nil, fmt.Errorf("plan has %d steps; planner.max_items is %d", len(doc.Steps), maxItems)
	}
	seen := map[string]bool{}
	plan := make([]protocol.PlanStep, 0, len(doc.Steps))
	for i, s := range doc.Steps {
		at := "step " + strconv.Itoa(i+1)
		if err := protocol.IDStep.Check(s.ID); err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		if seen[s.ID] {
			return nil, fmt.Errorf("%s id %q is used twice", at, s.ID)
		}
		instr := strings.TrimSpace(s.Instruction)
		if instr == "" {
			return nil, fmt.Errorf("%s (%s) has an empty instruction", at, s.ID)
		}
		deps := make([]string, 0, len(s.DependsOn))
		for _, d := range s.DependsOn {
			// Only earlier steps may be named, which also rules out cycles and self-dependencies.
			if !seen[d] {
				return nil, fmt.Errorf("%s (%s) depends on %q, which is not an earlier step", at, s.ID, d)
			}
			if contains(deps, d) {
				return nil, fmt.Errorf("%s (%s) lists dependency %q twice", at, s.ID, d)
			}
			deps = append(deps, d)
		}
		seen[s.ID] = true
		ps := protocol.PlanStep{StepID: s.ID, Instruction: instr, Status: protocol.StepPending}
		if len(deps) > 0 {
			ps.DependsOn = deps
		}
		plan = append(plan, ps)
	}
	return plan, nil
}

// decompose asks the planning model for a plan. It never fails: a model error or a plan that
// breaks the rules becomes a single step, and a decision event says why. The call's tokens are
// recorded as a model_call event so the session's usage counts them. Like an executor's, the
// call is checked against the session tree's budget first and charged to its ledger after: a
// tree whose budget is spent is not planned, and its one step then ends budget_exceeded.
func (p *Planner) decompose(ctx context.Context, t protocol.Task, scope govern.Scope) []protocol.PlanStep {
	cfg := p.d.Config.ForRole(protocol.RolePlanner)
	if ex := p.checkBudget(ctx, scope); ex != nil {
		return p.fallback(t, "not planning: "+ex.Error())
	}
	if !scope.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, scope.Deadline)
		defer cancel()
	}
	user := "Task:\n" + t.Task
	// A mature skill is the plan's template: the system prompt stays the same for every task
	// (cached), the procedure travels with the task.
	if k := p.skillFor(ctx, t); k != nil {
		user += "\n\n" + skillTemplate(*k)
		p.emit(protocol.Event{SessionID: t.SessionID, Type: protocol.EvDecision, Agent: t.Agent, Role: protocol.RolePlanner,
			Text:  fmt.Sprintf("planning from skill %s v%d (confidence %.2f)", k.Skill.Name, k.Skill.Version, k.Skill.Confidence),
			Attrs: map[string]string{"decision": "skill_template", "skill": k.ID}, Recalled: []protocol.Recalled{*k}})
	}
	req := llm.Request{
		Model:  cfg.Model,
		System: []llm.SystemBlock{{Text: plannerPrompt(p.mode, p.maxItems)}},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText,
			Text: user}}}},
		MaxTokens: cfg.MaxTokens,
		CacheTTL:  cfg.CacheTTL,
		Role:      protocol.RolePlanner,
	}
	start := time.Now()
	resp, err := p.model.Complete(ctx, req)
	ev := protocol.Event{SessionID: t.SessionID, Type: protocol.EvModelCall, Agent: t.Agent, Role: protocol.RolePlanner,
		Model: cfg.Model, Provider: p.model.Provider(), LatencyMS: time.Since(start).Milliseconds(),
		Attrs: map[string]string{"cache_ttl": cfg.CacheTTL}}
	if err != nil {
		ev.Reason = err.Error()
		p.emit(ev)
		return p.fallback(t, "planner model failed: "+err.Error())
	}
	u := resp.Usage
	ev.Usage, ev.StopReason = &u, resp.StopReason
	if resp.Model != "" {
		ev.Model = resp.Model
	}
	p.emit(ev)
	p.charge(ctx, scope, ev.Model, cfg.CacheTTL, u)
	plan, err := parsePlan(resp.Text, p.maxItems)
	if err != nil {
		return p.fallback(t, "bad plan: "+err.Error())
	}
	if len(plan) == 1 {
		// One item is the whole task: run it as the plain single step, with no partial instruction.
		return singleStep()
	}
	return plan
}

func (p *Planner) fallback(t protocol.Task, why string) []protocol.PlanStep {
	p.emit(protocol.Event{SessionID: t.SessionID, Type: protocol.EvDecision, Agent: t.Agent, Role: protocol.RolePlanner,
		Text: "running the task as one step: " + why, Attrs: map[string]string{"decision": "plan_fallback"}})
	return singleStep()
}

// emit records an event the session can do without; a lost one is logged, not retried.
func (p *Planner) emit(ev protocol.Event) {
	if err := p.trace.Emit(ev); err != nil {
		p.d.Logger.Warn("trace", "session", ev.SessionID, "type", ev.Type, "err", err)
	}
}

// sinkTexts returns the answers of the steps nothing depends on, in plan order.
func sinkTexts(plan []protocol.PlanStep) []string {
	used := map[string]bool{}
	for _, s := range plan {
		for _, d := range s.DependsOn {
			used[d] = true
		}
	}
	var out []string
	for _, s := range plan {
		if !used[s.StepID] {
			if t := strings.TrimSpace(s.FinalText); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// scope is the session's budget scope; a root that cannot be read leaves only the session's own
// budget, and the log says so.
func (p *Planner) scope(ctx context.Context, sess protocol.Session) govern.Scope {
	if sess.Root == "" {
		return govern.ScopeOf(sess, nil)
	}
	root, err := p.get(ctx, sess.Root)
	if err != nil {
		p.d.Logger.Warn("read root session for its budget", "session", sess.SessionID, "root", sess.Root, "err", err)
		return govern.ScopeOf(sess, nil)
	}
	return govern.ScopeOf(sess, &root)
}

// checkBudget reports a limit the session tree has reached before a planning call.
func (p *Planner) checkBudget(ctx context.Context, scope govern.Scope) *govern.Exceeded {
	if !scope.Limited() && scope.Deadline.IsZero() {
		return nil
	}
	ex, err := p.ledger.CheckTurn(ctx, scope, time.Now())
	if err != nil {
		p.d.Logger.Warn("read budget ledger", "session", scope.Session, "err", err)
	}
	return ex
}

// charge records the planning call's usage against the session and its root.
func (p *Planner) charge(ctx context.Context, scope govern.Scope, model, ttl string, u protocol.Usage) {
	if !scope.Limited() {
		return
	}
	d, known := govern.ModelDelta(model, ttl, u)
	if !known && (scope.Own.MaxUSD > 0 || scope.RootBudget.MaxUSD > 0) {
		p.d.Logger.Warn("model has no known price: max_usd cannot count its calls (add it to the price table)", "model", model, "session", scope.Session)
	}
	if err := p.ledger.Charge(ctx, d, scope.Keys()...); err != nil {
		p.d.Logger.Warn("charge budget ledger", "session", scope.Session, "err", err)
	}
}
