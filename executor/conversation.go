package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// payloads opens the object store that keeps transcripts.
func (e *Executor) payloads(ctx context.Context) (jetstream.ObjectStore, error) {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	if e.objects != nil {
		return e.objects, nil
	}
	js, err := e.d.Conn.ObjectStores(ctx)
	if err != nil {
		return nil, err
	}
	obs, err := js.ObjectStore(ctx, e.d.Names.Bucket(protocol.ObjectPayloads))
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", e.d.Names.Bucket(protocol.ObjectPayloads), err)
	}
	e.objects = obs
	return obs, nil
}

// continueConversation puts the previous turn's transcript before this turn's message, so the
// model reads the whole conversation; the previous system blocks are kept as they were, so the
// cached prefix (tools, system, earlier turns) stays byte for byte the same.
func (r *run) continueConversation(ctx context.Context) error {
	prev := r.step.Previous
	if prev == "" {
		return nil
	}
	obs, err := r.e.payloads(ctx)
	if err != nil {
		return err
	}
	data, err := obs.GetBytes(ctx, protocol.TranscriptObject(prev))
	if err != nil {
		return fmt.Errorf("read the transcript of %s, which this turn continues: %w", prev, err)
	}
	t, err := llm.DecodeTranscript(data)
	if err != nil {
		return fmt.Errorf("transcript of %s: %w", prev, err)
	}
	if len(t.System) > 0 {
		r.system = t.System
	}
	for i := range t.Messages {
		t.Messages[i].Cache = false
	}
	follow := r.msgs[len(r.msgs)-1]
	// Calls the last turn ended with (finish, or calls cut off by a limit) get an answer first:
	// providers refuse a tool call without its result.
	if n := len(t.Messages); n > 0 && t.Messages[n-1].Role == llm.RoleAssistant {
		var answers []llm.Block
		for _, b := range t.Messages[n-1].Content {
			if b.Type == llm.BlockToolUse && b.ToolUse != nil {
				answers = append(answers, llm.Block{Type: llm.BlockToolResult,
					ToolResult: &llm.ToolResult{CallID: b.ToolUse.ID, Content: `{"ok":true,"note":"the previous turn ended here"}`}})
			}
		}
		follow.Content = append(answers, follow.Content...)
	}
	r.msgs = append(t.Messages, follow)
	r.e.emit(r.step, protocol.Event{Type: protocol.EvDecision, Role: protocol.RoleExecutor,
		Text:  fmt.Sprintf("continuing the conversation of %s (%d earlier messages)", prev, len(t.Messages)),
		Attrs: map[string]string{"previous": prev}})
	return nil
}

// saveTranscript keeps the step's transcript for the conversation's next turn. A failure is
// logged: the step's result stands, only a follow-up would miss the history.
func (r *run) saveTranscript() {
	if r.ctx == nil || len(r.msgs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 5*time.Second)
	defer cancel()
	data, err := llm.EncodeTranscript(r.system, r.msgs)
	if err == nil {
		var obs jetstream.ObjectStore
		if obs, err = r.e.payloads(ctx); err == nil {
			_, err = obs.PutBytes(ctx, protocol.TranscriptObject(r.step.SessionID), data)
		}
	}
	if err != nil {
		r.e.d.Logger.Warn("save transcript (a follow-up to this session will lack its history)", "session", r.step.SessionID, "err", err)
	}
}
