package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools/retrieve"
)

// findToolsLimit is how many tools one find_tools call may add.
const findToolsLimit = 5

// patternBoost is added to the score of a tool that a learned success pattern retrieved for
// this step names ("for tasks like X, use Y"): more than any score a tool gets from its text,
// so the tools that worked before on similar tasks are offered.
const patternBoost = 1.0

// embedRetry is how long the executor ranks by BM25 alone after the embedder failed, before
// it asks again: a missing memoryd must not cost every step a timeout.
const embedRetry = 30 * time.Second

// embedTimeout bounds one embedding request to memoryd: a cold catalogue of 32 tools takes
// MiniLM a second or two on a busy CPU; a missing memoryd fails at once (no responders).
const embedTimeout = 15 * time.Second

// embedBatch is how many texts go in one embedding request, to stay far below max_payload.
const embedBatch = 32

// toolRetrieval is the executor's tool ranker. Embeddings come from memoryd's embed endpoint
// over NATS (the executor does not load the model itself); tool vectors are cached by manifest
// content in the ranker, so a catalogue is embedded once per executor process.
type toolRetrieval struct {
	e      *Executor
	ranker *retrieve.Ranker

	mu      sync.Mutex
	down    error
	retryAt time.Time
}

func (e *Executor) retrieval() *toolRetrieval {
	e.trOnce.Do(func() {
		e.tr = &toolRetrieval{e: e}
		e.tr.ranker = retrieve.New(e.tr.embed, 0)
	})
	return e.tr
}

// embed asks memoryd for vectors. While memoryd is failing it answers at once with the last
// error, and it logs each change of state once: degraded ranking is never silent.
func (t *toolRetrieval) embed(ctx context.Context, texts []string) ([][]float32, string, error) {
	t.mu.Lock()
	if t.down != nil && time.Now().Before(t.retryAt) {
		err := t.down
		t.mu.Unlock()
		return nil, "", err
	}
	t.mu.Unlock()
	vecs, model, err := t.request(ctx, texts)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if t.down == nil {
			t.e.d.Logger.Warn("tool retrieval: the embedder is unavailable, ranking tools by BM25 alone until it answers "+
				"(start memoryd with the same NATS, e.g. `skein up`)", "err", err)
		}
		t.down, t.retryAt = err, time.Now().Add(embedRetry)
		return nil, "", err
	}
	if t.down != nil {
		t.e.d.Logger.Info("tool retrieval: the embedder answers again; ranking tools by embeddings and BM25")
	}
	t.down = nil
	return vecs, model, nil
}

func (t *toolRetrieval) request(ctx context.Context, texts []string) ([][]float32, string, error) {
	var out [][]float32
	model := ""
	for start := 0; start < len(texts); start += embedBatch {
		req := protocol.MemoryEmbedRequest{Texts: texts[start:min(start+embedBatch, len(texts))]}
		data, err := protocol.Marshal(&req)
		if err != nil {
			return nil, "", err
		}
		rctx, cancel := context.WithTimeout(ctx, embedTimeout)
		msg, err := t.e.d.Conn.NC.RequestWithContext(rctx, t.e.d.Names.Memory(protocol.MemEmbed), data)
		cancel()
		if err != nil {
			return nil, "", fmt.Errorf("memoryd embed: %w", err)
		}
		var rep protocol.MemoryEmbedReply
		if err := protocol.Unmarshal(msg.Data, &rep); err != nil {
			return nil, "", fmt.Errorf("memoryd embed reply: %w", err)
		}
		if err := rep.Err(); err != nil {
			return nil, "", fmt.Errorf("memoryd embed: %w", err)
		}
		if model != "" && rep.Model != model {
			return nil, "", fmt.Errorf("memoryd embed: model changed from %s to %s mid-request", model, rep.Model)
		}
		model = rep.Model
		out = append(out, rep.Vectors...)
	}
	return out, model, nil
}

// toolset is one step's tools: everything the agent may call, and the part of it offered to
// the model. The offered set is fixed for a model turn; it grows only between turns, when the
// model asked for more (find_tools, or a call to a known tool that was not offered).
type toolset struct {
	all     []protocol.ToolSpec // sorted by name
	byName  map[string]protocol.ToolSpec
	offered []string // sorted; built-ins not included
	find    bool     // find_tools is offered
	read    bool     // read_result is offered
	mem     bool     // remember and recall are offered (memory.session_tools)

	pending   []string
	pendingBy []string
	widenings int
	used      []string
}

// offerTools fixes the step's tool set. With tools.retrieval on, the step is offered the top_k
// tools that best fit its task and instruction, plus always_include and the tools named by
// success patterns retrieved for it; otherwise every tool.
func (r *run) offerTools(ctx context.Context, specs []protocol.ToolSpec, guides []protocol.Guideline) {
	ts := &toolset{byName: map[string]protocol.ToolSpec{}, mem: r.e.memoryTools()}
	for _, s := range specs {
		if protocol.Builtin(s.Name) || (ts.mem && (s.Name == protocol.ToolRemember || s.Name == protocol.ToolRecall)) {
			r.e.d.Logger.Warn("ignoring a published tool with a built-in tool's name", "tool", s.Name)
			continue
		}
		ts.all = append(ts.all, s)
		ts.byName[s.Name] = s
	}
	r.ts = ts
	r.tools = ts.byName
	rc := r.e.d.Config.Tools.Retrieval
	if !rc.Enabled {
		for _, s := range ts.all {
			ts.offered = append(ts.offered, s.Name)
		}
		// The trace says what was offered either way: the miner's lesson gate lets a lesson name
		// the tools its session was offered ("call db_open first" after a db_query that lacked it).
		r.e.emit(r.step, protocol.Event{Type: protocol.EvTools, Role: protocol.RoleExecutor, Tools: ts.offered,
			Attrs: map[string]string{"phase": "offered", "catalog": fmt.Sprint(len(ts.all)), "ranker": "all (tools.retrieval off)"}})
		r.defs = ts.defs()
		return
	}
	ev := protocol.Event{Type: protocol.EvTools, Role: protocol.RoleExecutor,
		Attrs: map[string]string{"phase": "offered", "catalog": fmt.Sprint(len(ts.all)), "top_k": fmt.Sprint(rc.TopK)}}
	boost := map[string]float64{}
	for _, g := range guides {
		if g.Polarity != protocol.PolarityPattern {
			continue
		}
		for _, t := range g.Tools {
			if _, ok := ts.byName[t]; ok {
				boost[t] = patternBoost
			}
		}
	}
	if len(ts.all) <= rc.TopK {
		ev.Attrs["ranker"] = "all (catalogue within top_k)"
		for _, s := range ts.all {
			ts.offered = append(ts.offered, s.Name)
		}
	} else {
		query := strings.TrimSpace(r.step.Task + "\n" + r.step.Instruction)
		res := r.e.retrieval().ranker.Rank(ctx, query, ts.all, retrieve.Options{TopK: rc.TopK, Always: rc.AlwaysInclude, Boost: boost})
		ts.offered = append([]string(nil), res.Offered...)
		sort.Strings(ts.offered)
		ts.find = true
		ev.Attrs["ranker"] = res.Mode
		if res.Err != nil {
			ev.Reason = "ranked by BM25 alone: " + res.Err.Error()
		}
		var boosted []string
		for t := range boost {
			boosted = append(boosted, t)
		}
		sort.Strings(boosted)
		if len(boosted) > 0 {
			ev.Attrs["boosted"] = strings.Join(boosted, ",")
		}
	}
	ev.Tools = ts.offered
	r.e.emit(r.step, ev)
	r.defs = ts.defs()
}

// defs are the tool definitions sent to the model: the offered tools by name, then the
// built-ins (finish, then find_tools and read_result once offered), so the block is the same for the same set.
func (ts *toolset) defs() []llm.ToolDef {
	out := make([]llm.ToolDef, 0, len(ts.offered)+3)
	for _, n := range ts.offered {
		s := ts.byName[n]
		out = append(out, llm.ToolDef{Name: s.Name, Description: s.Description, InputSchema: s.InputSchema})
	}
	// finish is always offered: every step ends by reporting whether its task was accomplished.
	out = append(out, finishDef)
	if ts.mem {
		out = append(out, rememberDef, recallDef)
	}
	if ts.find {
		out = append(out, findToolsDef)
	}
	if ts.read {
		out = append(out, readResultDef)
	}
	return out
}

func (ts *toolset) isOffered(name string) bool {
	return slices.Contains(ts.offered, name) || name == protocol.ToolFinish || (name == protocol.ToolFindTools && ts.find) ||
		(ts.mem && (name == protocol.ToolRemember || name == protocol.ToolRecall)) ||
		(name == protocol.ToolReadResult && ts.read)
}

// request queues a tool to be added after this turn.
func (ts *toolset) request(name, by string) {
	if ts.isOffered(name) || slices.Contains(ts.pending, name) {
		return
	}
	ts.pending = append(ts.pending, name)
	ts.pendingBy = append(ts.pendingBy, by)
}

// beforeCall handles what the toolhost must not see: built-ins run here, unknown tools are
// refused, and a known tool that was not offered is queued for widening and then runs. It
// reports whether it answered the call itself.
func (r *run) beforeCall(ctx context.Context, c llm.ToolCall) (protocol.ToolReply, bool) {
	ts := r.ts
	if !slices.Contains(ts.used, c.Name) {
		ts.used = append(ts.used, c.Name)
	}
	switch {
	case c.Name == protocol.ToolFindTools && ts.find:
		return r.findTools(ctx, c), true
	case c.Name == protocol.ToolReadResult && ts.read:
		return r.readResult(ctx, c), true
	case c.Name == protocol.ToolRemember && ts.mem:
		return r.remember(ctx, c), true
	case c.Name == protocol.ToolRecall && ts.mem:
		return r.recall(ctx, c), true
	}
	if _, ok := ts.byName[c.Name]; !ok {
		msg := fmt.Sprintf("there is no tool named %q; the available tools are: %s", c.Name, strings.Join(ts.offered, ", "))
		if ts.find {
			msg += "; call find_tools with what you need to do to find more"
		}
		return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrUnknown, Error: msg}}, true
	}
	if !ts.isOffered(c.Name) {
		ts.request(c.Name, "call")
	}
	return protocol.ToolReply{}, false
}

// widen applies the additions this turn asked for and returns the note that tells the model
// what changed (nil when nothing did). Tools count against tools.retrieval.max_widen once per
// turn; read_result, offered once a result was too large, does not.
func (r *run) widen(turn int) []llm.Block {
	ts := r.ts
	if len(ts.pending) == 0 {
		return nil
	}
	pending, by := ts.pending, ts.pendingBy
	ts.pending, ts.pendingBy = nil, nil
	var added, addedBy, refused []string
	limit := r.e.d.Config.Tools.Retrieval.MaxWiden
	for i, n := range pending {
		switch {
		case n == protocol.ToolReadResult:
			ts.read = true
		case ts.widenings >= limit:
			refused = append(refused, n)
			continue
		default:
			ts.offered = append(ts.offered, n)
		}
		added, addedBy = append(added, n), append(addedBy, by[i])
	}
	if len(added) > 0 && !slices.Equal(added, []string{protocol.ToolReadResult}) {
		ts.widenings++
	}
	var note []string
	if len(added) > 0 {
		sort.Strings(ts.offered)
		r.defs = ts.defs()
		r.e.emit(r.step, protocol.Event{Type: protocol.EvTools, Role: protocol.RoleExecutor, Turn: turn, Tools: added,
			Attrs: map[string]string{"phase": "widened", "by": strings.Join(uniq(addedBy), ","), "widening": fmt.Sprint(ts.widenings)}})
		var desc []string
		for _, n := range added {
			switch s, ok := ts.byName[n]; {
			case ok:
				desc = append(desc, fmt.Sprintf("%s (%s)", n, firstSentence(s.Description)))
			case n == protocol.ToolReadResult:
				desc = append(desc, n+" (pages through a result too large to show whole)")
			default:
				desc = append(desc, n)
			}
		}
		note = append(note, "[Tools added to your tool list for this step: "+strings.Join(desc, "; ")+".]")
	}
	if len(refused) > 0 {
		r.e.emit(r.step, protocol.Event{Type: protocol.EvTools, Role: protocol.RoleExecutor, Turn: turn, Tools: refused,
			Reason: fmt.Sprintf("not added: the tool set of this step already grew %d times (tools.retrieval.max_widen)", limit),
			Attrs:  map[string]string{"phase": "refused"}})
		note = append(note, fmt.Sprintf("[Tools not added to your list (limit of %d additions per step reached): %s. "+
			"You can still call them by name.]", limit, strings.Join(refused, ", ")))
	}
	return []llm.Block{{Type: llm.BlockText, Text: strings.Join(note, "\n")}}
}

// traceUsed records which tools the step called, with the offered set for comparison.
func (r *run) traceUsed(turn int) {
	if r.ts == nil || !r.e.d.Config.Tools.Retrieval.Enabled {
		return
	}
	r.e.emit(r.step, protocol.Event{Type: protocol.EvTools, Role: protocol.RoleExecutor, Turn: turn, Tools: r.ts.used,
		Attrs: map[string]string{"phase": "used", "offered": strings.Join(r.ts.offered, ","), "widenings": fmt.Sprint(r.ts.widenings)}})
}

var findToolsDef = llm.ToolDef{
	Name: protocol.ToolFindTools,
	Description: "Search this agent's other tools by what you need to do, and add the best matches to your tool list " +
		"(you can call them from your next turn). Use it when none of your tools fits the task.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"What you need to do, in a few words."}},"required":["query"],"additionalProperties":false}`),
}

// findTools ranks the tools not offered yet against the query and queues the best for widening.
func (r *run) findTools(ctx context.Context, c llm.ToolCall) protocol.ToolReply {
	var args struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil || strings.TrimSpace(args.Query) == "" {
		return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrBadArgs,
			Error: `find_tools needs {"query": "what you need to do"}`}}
	}
	ts := r.ts
	var rest []protocol.ToolSpec
	for _, s := range ts.all {
		if !ts.isOffered(s.Name) && !slices.Contains(ts.pending, s.Name) {
			rest = append(rest, s)
		}
	}
	hits, res := r.e.retrieval().ranker.Search(ctx, args.Query, rest, nil, findToolsLimit)
	type found struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	out := struct {
		Added []found `json:"added"`
		Note  string  `json:"note"`
	}{Added: []found{}}
	for _, h := range hits {
		ts.request(h, protocol.ToolFindTools)
		out.Added = append(out.Added, found{h, ts.byName[h].Description})
	}
	switch {
	case len(hits) == 0:
		out.Note = "no other tool matches; your tools are: " + strings.Join(ts.offered, ", ")
	default:
		out.Note = "these tools are in your tool list from your next turn"
	}
	if res.Err != nil {
		out.Note += " (matched by keywords only: " + res.Err.Error() + ")"
	}
	data, _ := json.Marshal(out)
	return protocol.ToolReply{ToolResult: protocol.ToolResult{OK: true, Result: data}}
}

func firstSentence(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, ". "); i > 0 {
		s = s[:i+1]
	}
	return clipString(s, 160)
}

func uniq(xs []string) []string {
	var out []string
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
