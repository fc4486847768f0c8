package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	llm "github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/llm/internal/call"
	"github.com/skein-mesh/skein/pkg/llm/llmtest"
)

const answer = "The total of two, three and five is ten, as the sum tool reported."

// The text reaches the caller while the model still writes, piece by piece, and the pieces
// make the answer.
func TestStreamedTextArrivesBeforeTheAnswer(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{{Text: answer, ChunkDelay: 20 * time.Millisecond}}})
	b := newBackend(t, srv.URL, nil)
	var s llmtest.Sink
	req := session("Add.", 0)
	req.Stream = s.Add
	resp, err := b.Complete(context.Background(), req)
	done := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != answer || s.Text() != answer || s.Pieces() < 10 {
		t.Fatalf("answer %q, streamed %q in %d pieces", resp.Text, s.Text(), s.Pieces())
	}
	if first := s.First(); done.Sub(first) < 100*time.Millisecond {
		t.Fatalf("the first piece came %v before the answer: not streamed as it was written", done.Sub(first))
	}
	if rec := srv.Requests()[0]; !rec.Streamed || rec.Cut {
		t.Fatalf("request %+v: want a streamed, whole answer", rec)
	}
}

// A tool call's arguments come in input_json_delta pieces; assembled, they are the call's JSON.
func TestStreamedToolUseArgumentsAssembled(t *testing.T) {
	args := map[string]any{"text": "a longer text, with \"quotes\" and ünïcödé", "n": 3, "nested": map[string]any{"xs": []any{1, 2, 3}}}
	srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{{Text: "Calling echo twice.",
		ToolCalls: []llmtest.ToolCall{{Name: "echo", Args: args}, {Name: "sum", Args: map[string]any{"xs": []any{2, 3}}}}}}})
	b := newBackend(t, srv.URL, nil)
	var s llmtest.Sink
	req := session("Echo.", 0)
	req.Stream = s.Add
	resp, err := b.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(args)
	if len(resp.ToolCalls) != 2 || resp.StopReason != llm.StopToolUse || !sameJSON(resp.ToolCalls[0].Args, want) ||
		!sameJSON(resp.ToolCalls[1].Args, []byte(`{"xs":[2,3]}`)) || resp.ToolCalls[0].ID == resp.ToolCalls[1].ID {
		t.Fatalf("tool calls %+v", resp.ToolCalls)
	}
	if s.Text() != "Calling echo twice." {
		t.Fatalf("streamed %q: only the text streams, not the arguments", s.Text())
	}
}

func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return string(ca) == string(cb)
}

// The streamed message's usage (input, output, cache writes and reads) is exactly what the
// same calls answered without streaming report, call after call of a cached session.
func TestStreamedUsageEqualsNonStreamed(t *testing.T) {
	script := llmtest.Script{Respond: func(r llmtest.Request) llmtest.Reply {
		return llmtest.Reply{Text: "Step " + itoa(r.N) + " done; " + strings.Repeat("more words ", r.N+1),
			ToolCalls: []llmtest.ToolCall{{Name: "echo", Args: map[string]any{"text": "step " + itoa(r.N)}}}}
	}}
	plain, streamed := llmtest.NewAnthropic(t, script), llmtest.NewAnthropic(t, script)
	ref, b := newBackend(t, plain.URL, nil), newBackend(t, streamed.URL, nil)
	for step := 0; step < 4; step++ {
		req := session("Echo four things.", step)
		req.Model = model
		params, err := ref.buildParams(req)
		if err != nil {
			t.Fatal(err)
		}
		params.MaxTokens = 512
		msg, err := ref.client.Messages.New(context.Background(), params) // the SDK's non-streaming call
		if err != nil {
			t.Fatal(err)
		}
		want := fromMessage(msg, nil)
		var s llmtest.Sink
		req.Stream = s.Add
		got, err := b.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got.Usage != want.Usage || got.Text != want.Text || got.StopReason != want.StopReason ||
			len(got.ToolCalls) != 1 || !sameJSON(got.ToolCalls[0].Args, want.ToolCalls[0].Args) {
			t.Fatalf("step %d: streamed %+v, not streamed %+v", step, got, want)
		}
		if step == 0 && got.Usage.CacheCreationInputTokens == 0 || step > 0 && got.Usage.CacheReadInputTokens == 0 {
			t.Fatalf("step %d: usage %+v: the session should write, then read, the cache", step, got.Usage)
		}
	}
	if plain.Requests()[0].Streamed || !streamed.Requests()[0].Streamed {
		t.Fatal("the reference calls must not stream and the backend's must")
	}
	if plain.Totals() != streamed.Totals() {
		t.Fatalf("totals: not streamed %+v, streamed %+v", plain.Totals(), streamed.Totals())
	}
}

// A stream cut before any text reached the caller is retried like any failed call; one cut after
// is not (the caller would see the answer twice) and fails saying so; one that ends without
// message_stop is a failure, never a shorter answer.
func TestCutStream(t *testing.T) {
	t.Run("before any text: retried", func(t *testing.T) {
		srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{
			{ToolCalls: []llmtest.ToolCall{{Name: "echo", Args: map[string]any{"text": "a long enough argument"}}}, CutAfter: 2},
			{Text: answer}}})
		b := newBackend(t, srv.URL, nil)
		var s llmtest.Sink
		req := session("Go.", 0)
		req.Stream = s.Add
		resp, err := b.Complete(context.Background(), req)
		if err != nil || resp.Text != answer || s.Text() != answer || srv.Calls() != 2 || !srv.Requests()[0].Cut {
			t.Fatalf("resp %+v err %v streamed %q calls %d", resp, err, s.Text(), srv.Calls())
		}
	})
	t.Run("after text: an honest error, no retry", func(t *testing.T) {
		srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{{Text: answer, CutAfter: 4}, {Text: answer}}})
		b := newBackend(t, srv.URL, nil)
		var s llmtest.Sink
		req := session("Go.", 0)
		req.Stream = s.Add
		resp, err := b.Complete(context.Background(), req)
		var cut *call.CutError
		var apiErr *llm.APIError
		if err == nil || !errors.As(err, &cut) || !errors.As(err, &apiErr) || resp != nil || srv.Calls() != 1 {
			t.Fatalf("resp %+v err %v calls %d", resp, err, srv.Calls())
		}
		if shown := s.Text(); cut.Shown != len(shown) || shown == "" || !strings.HasPrefix(answer, shown) ||
			!strings.Contains(err.Error(), "stream broke after") || !strings.Contains(err.Error(), "not retried") {
			t.Fatalf("error %q after streaming %q", err, shown)
		}
	})
	t.Run("no one streams: retried", func(t *testing.T) {
		srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{{Text: answer, CutAfter: 4}, {Text: answer}}})
		resp, err := newBackend(t, srv.URL, nil).Complete(context.Background(), session("Go.", 0))
		if err != nil || resp.Text != answer || srv.Calls() != 2 {
			t.Fatalf("resp %+v err %v calls %d", resp, err, srv.Calls())
		}
	})
	t.Run("ends without message_stop", func(t *testing.T) {
		srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{{Text: answer, CutAfter: 3, CutClean: true}}})
		var s llmtest.Sink
		req := session("Go.", 0)
		req.Stream = s.Add
		_, err := newBackend(t, srv.URL, nil).Complete(context.Background(), req)
		if err == nil || !strings.Contains(err.Error(), "before message_stop") || srv.Calls() != 1 {
			t.Fatalf("err %v calls %d", err, srv.Calls())
		}
	})
}

// A reply cut at max_tokens is asked again with a larger limit: the caller is told to drop what
// it was shown before the new answer streams.
func TestMaxTokensRetryRestartsTheStream(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{{Text: "The first try, cut short", CutAtMaxTokens: true}, {Text: answer}}})
	var s llmtest.Sink
	req := session("Go.", 0)
	req.Stream = s.Add
	resp, err := newBackend(t, srv.URL, nil).Complete(context.Background(), req)
	if err != nil || resp.Text != answer || s.Text() != answer || s.Restarts() != 1 {
		t.Fatalf("resp %+v err %v streamed %q restarts %d", resp, err, s.Text(), s.Restarts())
	}
}
