package call

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	llm "github.com/skein-mesh/skein/pkg/llm/core"
)

func TestRetryAfter(t *testing.T) {
	h := http.Header{}
	if RetryAfter(h) != 0 || RetryAfter(nil) != 0 {
		t.Fatal("empty header")
	}
	h.Set("Retry-After", "3")
	if got := RetryAfter(h); got != 3*time.Second {
		t.Fatalf("seconds: %v", got)
	}
	h.Set("Retry-After-Ms", "250")
	if got := RetryAfter(h); got != 250*time.Millisecond {
		t.Fatalf("ms wins: %v", got)
	}
	h = http.Header{}
	h.Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
	if got := RetryAfter(h); got < 59*time.Minute {
		t.Fatalf("http date: %v", got)
	}
	h.Set("Retry-After", "soon")
	if RetryAfter(h) != 0 {
		t.Fatal("garbage parsed")
	}
}

func TestClassification(t *testing.T) {
	for _, s := range []int{408, 429, 500, 502, 503, 504, 529} {
		if !StatusTransient(s) {
			t.Errorf("%d not transient", s)
		}
	}
	for _, s := range []int{400, 401, 403, 404, 413, 422} {
		if StatusTransient(s) {
			t.Errorf("%d transient", s)
		}
	}
	for _, err := range []error{io.EOF, io.ErrUnexpectedEOF, fmt.Errorf("post: %w", syscall.ECONNRESET)} {
		if !NetTransient(err) {
			t.Errorf("%v not transient", err)
		}
	}
	if NetTransient(errors.New("bad request")) || NetTransient(nil) {
		t.Error("plain error transient")
	}
}

func TestDoRetriesThenGivesUp(t *testing.T) {
	p := NewPolicy("fake", 2, 5, llm.BuildOptions(llm.WithRetryWait(time.Millisecond, 2*time.Millisecond)))
	calls := 0
	_, err := Do(context.Background(), p, func(error) Failure { return Failure{Status: 503, Transient: true} },
		func(context.Context) (int, error) { calls++; return 0, errors.New("unavailable") })
	var ae *llm.APIError
	if !errors.As(err, &ae) || calls != 3 || ae.Attempts != 3 || ae.Status != 503 || ae.Provider != "fake" {
		t.Fatalf("calls %d err %v", calls, err)
	}
	calls = 0
	v, err := Do(context.Background(), p, func(error) Failure { return Failure{Transient: true} },
		func(context.Context) (int, error) {
			calls++
			if calls < 2 {
				return 0, io.EOF
			}
			return 7, nil
		})
	if err != nil || v != 7 || calls != 2 {
		t.Fatalf("v %d calls %d err %v", v, calls, err)
	}
	if NewPolicy("x", 0, 0, llm.Options{}).MaxRetries != DefaultMaxRetries || NewPolicy("x", -1, 0, llm.Options{}).MaxRetries != 0 {
		t.Fatal("policy defaults")
	}
}

func TestMaxTokensRetryKeepsCutReplyOnFailure(t *testing.T) {
	cut := &llm.Response{StopReason: llm.StopMaxTokens, Text: "partial"}
	var limits []int
	got, err := WithMaxTokensRetry(context.Background(), 100, func(string, ...any) {}, NewOutput(nil),
		func(_ context.Context, n int) (*llm.Response, error) {
			limits = append(limits, n)
			if n == 100 {
				return cut, nil
			}
			return nil, errors.New("boom")
		})
	if err != nil || got != cut || fmt.Sprint(limits) != "[100 200]" {
		t.Fatalf("got %+v err %v limits %v", got, err, limits)
	}
	// A usable tool call is not retried even when the stop reason is max_tokens.
	limits = nil
	withCall := &llm.Response{StopReason: llm.StopMaxTokens, ToolCalls: []llm.ToolCall{{Name: "x", Args: []byte(`{}`)}}}
	_, _ = WithMaxTokensRetry(context.Background(), 100, func(string, ...any) {}, NewOutput(nil),
		func(_ context.Context, n int) (*llm.Response, error) {
			limits = append(limits, n)
			return withCall, nil
		})
	if len(limits) != 1 {
		t.Fatalf("retried a usable tool call: %v", limits)
	}
}
