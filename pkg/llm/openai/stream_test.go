package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sdk "github.com/openai/openai-go/v3"

	llm "github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/llm/internal/call"
	"github.com/skein-mesh/skein/pkg/llm/llmtest"
)

const answer = "The total of two, three and five is ten, as the sum tool reported."

func TestStreamedTextArrivesBeforeTheAnswer(t *testing.T) {
	srv := llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{{Text: answer, ChunkDelay: 20 * time.Millisecond}}})
	var s llmtest.Sink
	req := session(0)
	req.Stream = s.Add
	resp, err := newBackend(t, srv.URL, nil).Complete(context.Background(), req)
	done := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != answer || s.Text() != answer || s.Pieces() < 10 || done.Sub(s.First()) < 100*time.Millisecond {
		t.Fatalf("answer %q, streamed %q in %d pieces", resp.Text, s.Text(), s.Pieces())
	}
	var body struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	rec := srv.Requests()[0]
	if err := json.Unmarshal(rec.Body, &body); err != nil || !body.Stream || !body.StreamOptions.IncludeUsage || !rec.Streamed {
		t.Fatalf("request %s: want stream with include_usage", rec.Body)
	}
}

// Tool call arguments arrive a few bytes per chunk, for several calls; assembled, each is its
// call's JSON, and the usage is the usage chunk's.
func TestStreamedToolCallsAndUsage(t *testing.T) {
	script := llmtest.Script{Respond: func(r llmtest.Request) llmtest.Reply {
		return llmtest.Reply{Text: fmt.Sprintf("Step %d.", r.N), ToolCalls: []llmtest.ToolCall{
			{Name: "echo", Args: map[string]any{"text": fmt.Sprintf("step %d with \"quotes\" and ünïcödé", r.N)}},
			{Name: "echo", Args: map[string]any{"text": "second"}}}}
	}}
	plain, streamed := llmtest.NewOpenAI(t, script), llmtest.NewOpenAI(t, script)
	ref, b := newBackend(t, plain.URL, nil), newBackend(t, streamed.URL, nil)
	for step := 0; step < 4; step++ {
		req := session(step)
		req.Model = "gpt-4o-mini"
		params, err := buildParams(req)
		if err != nil {
			t.Fatal(err)
		}
		params.MaxTokens = sdk.Int(512)
		cc, err := ref.client.Chat.Completions.New(context.Background(), params) // the SDK's non-streaming call
		if err != nil {
			t.Fatal(err)
		}
		want, err := fromCompletion(cc)
		if err != nil {
			t.Fatal(err)
		}
		var s llmtest.Sink
		req.Stream = s.Add
		got, err := b.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got.Usage != want.Usage || got.Text != want.Text || s.Text() != want.Text || got.StopReason != llm.StopToolUse || len(got.ToolCalls) != 2 {
			t.Fatalf("step %d: streamed %+v, not streamed %+v", step, got, want)
		}
		for i := range got.ToolCalls {
			if string(got.ToolCalls[i].Args) != string(want.ToolCalls[i].Args) || got.ToolCalls[i].ID != want.ToolCalls[i].ID || !got.ToolCalls[i].ValidArgs() {
				t.Fatalf("step %d call %d: streamed %+v, not streamed %+v", step, i, got.ToolCalls[i], want.ToolCalls[i])
			}
		}
		if step > 0 && got.Usage.CacheReadInputTokens == 0 {
			t.Fatalf("step %d: no cached tokens in %+v", step, got.Usage)
		}
	}
	if plain.Totals() != streamed.Totals() {
		t.Fatalf("totals: not streamed %+v, streamed %+v", plain.Totals(), streamed.Totals())
	}
}

func TestCutStream(t *testing.T) {
	t.Run("before any text: retried", func(t *testing.T) {
		srv := llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{
			{ToolCalls: []llmtest.ToolCall{{Name: "echo", Args: map[string]any{"text": "a long enough argument"}}}, CutAfter: 2},
			{Text: answer}}})
		var s llmtest.Sink
		req := session(0)
		req.Stream = s.Add
		resp, err := newBackend(t, srv.URL, nil).Complete(context.Background(), req)
		if err != nil || resp.Text != answer || s.Text() != answer || srv.Calls() != 2 {
			t.Fatalf("resp %+v err %v calls %d", resp, err, srv.Calls())
		}
	})
	t.Run("after text: an honest error, no retry", func(t *testing.T) {
		srv := llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{{Text: answer, CutAfter: 4}, {Text: answer}}})
		var s llmtest.Sink
		req := session(0)
		req.Stream = s.Add
		_, err := newBackend(t, srv.URL, nil).Complete(context.Background(), req)
		var cut *call.CutError
		if !errors.As(err, &cut) || cut.Shown != len(s.Text()) || srv.Calls() != 1 || !strings.Contains(err.Error(), "not retried") {
			t.Fatalf("err %v after %q, calls %d", err, s.Text(), srv.Calls())
		}
	})
	t.Run("ends without a finish reason", func(t *testing.T) {
		srv := llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{{Text: answer, CutAfter: 3, CutClean: true}}})
		var s llmtest.Sink
		req := session(0)
		req.Stream = s.Add
		_, err := newBackend(t, srv.URL, nil).Complete(context.Background(), req)
		if err == nil || !strings.Contains(err.Error(), "before a finish reason") || srv.Calls() != 1 {
			t.Fatalf("err %v calls %d", err, srv.Calls())
		}
	})
}
