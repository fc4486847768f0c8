package executor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

// defaultWindow is the window of an Executor not built by New (which resolves the model's limits).
const defaultWindow = 200_000

// keepRecent is how many of the newest messages are never compacted: the model needs the results
// it is about to reason over.
const keepRecent = 2

// compact keeps the transcript under llm.context_budget of the model's window. First it replaces
// the bodies of old tool results with short stubs (keeping every call and its pairing); if that
// is not enough it folds older turns into a digest in the first user message; if the newest
// results alone are still over, each is stored whole and replaced by a head-and-tail view with a
// handle (results.go). The system blocks are never touched; the tools gain only read_result.
func (r *run) compact(ctx context.Context, turn int) {
	cfg := r.e.d.Config.ForRole(protocol.RoleExecutor)
	window := r.e.contextWindow()
	budget := int(float64(window) * cfg.ContextBudget)
	size := r.transcriptTokens()
	if size <= budget {
		return
	}
	before := size
	names := r.callNames()
	for i := 1; i < len(r.msgs)-keepRecent; i++ {
		for j, b := range r.msgs[i].Content {
			if b.Type != llm.BlockToolResult || strings.HasPrefix(b.ToolResult.Content, "[elided") {
				continue
			}
			tr := *b.ToolResult
			n := tokenize.Count(tr.Content)
			tr.Content = fmt.Sprintf("[elided to save context: %d tokens of %s output; call it again if needed]", n, names[tr.CallID])
			if h, ok := r.rs.handles[tr.CallID]; ok {
				tr.Content = fmt.Sprintf("[elided to save context: %d tokens of %s output; the whole result is stored: read_result(%q)]",
					n, names[tr.CallID], h)
			}
			r.msgs[i].Content[j].ToolResult = &tr
			r.sizes[i] = -1
		}
	}
	size = r.transcriptTokens()
	r.noteCompaction(turn, before-size, "dropped bodies of old tool results")
	if size > budget && len(r.msgs) > keepRecent+1 {
		before = size
		kept := r.foldOldTurns(ctx, turn, names)
		size = r.transcriptTokens()
		r.noteCompaction(turn, before-size, "summarized older turns: "+kept)
	}
	if size > budget {
		// The newest results are over the budget on their own: each is stored whole and the
		// model gets a head-and-tail view of it, sized to what is left, and read_result.
		before = size
		r.boundNewest(ctx, turn, budget-size)
		size = r.transcriptTokens()
		r.noteCompaction(turn, before-size, "stored the newest tool results and kept their head and tail")
	}
}

// overWindow says why no request of this step can fit the model's context window, or "" when
// one can: the system blocks, the tools, the first message (the task, with the tactical
// guidelines), a conversation's new message, and the room kept for the answer. Compaction
// shrinks results and folds turns in between but never cuts those, so a task or message too
// large for the window ends the step here, before a model call that the provider would refuse,
// or, worse, answer from a silently cut prompt.
func (r *run) overWindow() string {
	cfg := r.e.d.Config.ForRole(protocol.RoleExecutor)
	window, answer := r.e.contextWindow(), r.e.maxTokens(cfg.MaxTokens)
	fixed := 0
	for _, s := range r.system {
		fixed += tokenize.Count(s.Text)
	}
	for _, d := range r.defs {
		fixed += tokenize.Count(d.Name) + tokenize.Count(d.Description) + tokenize.Count(string(d.InputSchema))
	}
	r.transcriptTokens()
	task := r.sizes[0]
	if r.step.Previous != "" {
		task += r.own // the new message; the first is the conversation's first task
	}
	if fixed+task+answer <= window {
		return ""
	}
	return fmt.Sprintf("the task does not fit the model's context window of %d tokens: its message is about %d tokens, "+
		"the system prompt and tools %d, and %d are kept for the answer (llm.max_tokens); "+
		"shorten the task (put large inputs in a file a tool can read) or use a model with a larger window (llm.context_window)",
		window, task, fixed, answer)
}

// noteCompaction traces a compaction that saved something: a pass with nothing left to drop
// (only the newest turns are over the budget) is not an event.
func (r *run) noteCompaction(turn, saved int, reason string) {
	if saved <= 0 {
		return
	}
	r.e.emit(r.step, protocol.Event{Type: protocol.EvCompaction, Role: protocol.RoleExecutor, Turn: turn,
		TokensSaved: int64(saved), Reason: reason})
}

// foldOldTurns replaces the turns between the task and the newest exchange with a summary: the
// notes of what the user said in them (extractNotes), then a digest of the calls made and how
// they ended. The summary is one block of the first message, replaced by the next fold, which
// carries its notes over; the system blocks, and so the cache breakpoints, are not touched. The
// cut starts at an assistant message so that every remaining tool result still follows its call.
func (r *run) foldOldTurns(ctx context.Context, turn int, names map[string]string) string {
	end := len(r.msgs) - keepRecent
	if end <= 1 || r.msgs[end].Role != llm.RoleAssistant {
		return ""
	}
	folded := r.msgs[1:end]
	prev, at := notesOf(r.msgs[0])
	notes, by := r.extractNotes(ctx, turn, prev.notes, folded)
	sum := summary{notes: notes, calls: append(prev.calls, callLines(folded, names)...)}
	block := llm.Block{Type: llm.BlockText, Text: sum.render(r.summaryBudget())}
	first := r.msgs[0]
	first.Content = slices.Clone(first.Content)
	if at >= 0 {
		first.Content[at] = block
	} else {
		first.Content = append(first.Content, block)
	}
	r.msgs = append([]llm.Message{first}, r.msgs[end:]...)
	r.sizes = nil // recounted on demand; folding is rare
	r.offerFacts(ctx, turn, prev.notes, notes)
	kept := parseSummary(block.Text)
	return fmt.Sprintf("%d note(s) of what the user said kept (%s), %d call line(s)", len(kept.notes), by, len(kept.calls))
}

func (r *run) callNames() map[string]string {
	names := map[string]string{}
	for _, m := range r.msgs {
		for _, b := range m.Content {
			if b.Type == llm.BlockToolUse {
				names[b.ToolUse.ID] = b.ToolUse.Name
			}
		}
	}
	return names
}

// transcriptTokens counts the variable part of the prompt with the real tokenizer. Each message
// is counted once, when first needed, and again only when compaction rewrites it: the check runs
// every turn, and a transcript re-tokenized each time would make every turn cost more than the
// last.
func (r *run) transcriptTokens() int {
	for len(r.sizes) < len(r.msgs) {
		r.sizes = append(r.sizes, -1)
	}
	n := 0
	for i, m := range r.msgs {
		if r.sizes[i] < 0 {
			r.sizes[i] = messageTokens(m)
		}
		n += r.sizes[i]
	}
	return n
}

func messageTokens(m llm.Message) int {
	n := 0
	for _, b := range m.Content {
		switch b.Type {
		case llm.BlockText:
			n += tokenize.Count(b.Text)
		case llm.BlockToolUse:
			n += tokenize.Count(b.ToolUse.Name) + tokenize.Count(string(b.ToolUse.Args))
		case llm.BlockToolResult:
			n += tokenize.Count(b.ToolResult.Content)
		}
	}
	return n
}
