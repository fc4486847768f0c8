// Package anthropic is the Backend for Anthropic's Messages API, built on the official Go SDK.
//
// It owns the wire side of prompt caching: it turns the request's cache marks (system blocks,
// the tool list, messages) into cache_control breakpoints, leaves out a mark whose prompt
// prefix is shorter than the model's minimum cacheable length (logging why), keeps at most
// four (dropping the earliest, so the newest message's always stays), and sends none when
// llm.cache is off. Transient errors are retried by skein's one policy (the SDK's own retries
// are disabled), a reply cut at max_tokens is retried once with a larger limit, and every
// attempt has a hard deadline.
//
// Every call streams (the SDK's NewStreaming): the text goes to Request.Stream as it arrives,
// and the events are accumulated into the same Message the non-streaming call returns, usage
// included (message_start's input and cache counts, message_delta's cumulative totals). A
// stream that ends before message_stop is a failed attempt, never a shorter answer.
package anthropic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/skein-mesh/skein/pkg/config"
	llm "github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/llm/internal/call"
)

// Provider is this backend's name in agent.yaml and in errors.
const Provider = "anthropic"

// defaultMaxTokens applies when neither the request nor agent.yaml sets one.
const defaultMaxTokens = 1024

// Backend calls the Messages API.
type Backend struct {
	client sdk.Client
	cfg    config.LLM
	opts   llm.Options
	policy call.Policy
}

var _ llm.Backend = (*Backend)(nil)

// New builds the backend. The API key is read from cfg.APIKeyEnv (default ANTHROPIC_API_KEY);
// use the factory's CheckKey first for a clear start-up error.
func New(cfg config.LLM, opts ...llm.Option) (*Backend, error) {
	o := llm.BuildOptions(opts...)
	reqOpts := []option.RequestOption{
		option.WithAPIKey(os.Getenv(llm.KeyEnv(cfg))),
		option.WithHTTPClient(o.HTTPClient),
		// One retry policy for the whole mesh: ours (backoff, retry-after, deadlines).
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		reqOpts = append(reqOpts, option.WithBaseURL(cfg.BaseURL))
	}
	switch cfg.Cache {
	case "", "auto", "off":
	default:
		return nil, fmt.Errorf("%s: llm.cache must be auto or off, got %q", Provider, cfg.Cache)
	}
	switch cfg.CacheTTL {
	case "", "5m", "1h":
	default:
		return nil, fmt.Errorf("%s: llm.cache_ttl must be 5m or 1h, got %q", Provider, cfg.CacheTTL)
	}
	return &Backend{
		client: sdk.NewClient(reqOpts...),
		cfg:    cfg,
		opts:   o,
		policy: call.NewPolicy(Provider, cfg.MaxRetries, cfg.TimeoutS, o),
	}, nil
}

// Provider implements llm.Backend.
func (b *Backend) Provider() string { return Provider }

// Complete implements llm.Backend.
func (b *Backend) Complete(ctx context.Context, req llm.Request) (*llm.Response, error) {
	start := time.Now()
	if req.Model == "" {
		req.Model = b.cfg.Model
	}
	if req.Model == "" {
		return nil, fmt.Errorf("%s: no model: set llm.model", Provider)
	}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = b.cfg.MaxTokens
	}
	if maxTokens <= 0 {
		maxTokens = defaultMaxTokens
	}
	params, err := b.buildParams(req)
	if err != nil {
		return nil, fmt.Errorf("%s: building request: %w", Provider, err)
	}
	out := call.NewOutput(req.Stream)
	resp, err := call.WithMaxTokensRetry(ctx, maxTokens, b.logInfo, out,
		func(ctx context.Context, maxTokens int) (*llm.Response, error) {
			params.MaxTokens = int64(maxTokens)
			return call.Do(ctx, b.policy, classify, func(ctx context.Context) (*llm.Response, error) {
				return b.stream(ctx, params, out)
			})
		})
	if err != nil {
		return nil, err
	}
	resp.Latency = time.Since(start)
	return resp, nil
}

// stream makes one streamed call and accumulates its events into the answer.
func (b *Backend) stream(ctx context.Context, params sdk.MessageNewParams, out *call.Output) (*llm.Response, error) {
	st := b.client.Messages.NewStreaming(ctx, params)
	defer st.Close()
	var msg sdk.Message
	// The tool arguments exactly as streamed: the SDK's accumulator empties arguments that do
	// not parse, and the executor must show the model what it sent.
	inputs := map[int64][]byte{}
	stopped := false
	for st.Next() {
		ev := st.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, out.Failed(fmt.Errorf("stream event %s: %w", ev.Type, err))
		}
		switch ev.Type {
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				out.Text(ev.Delta.Text)
			case "input_json_delta":
				inputs[ev.Index] = append(inputs[ev.Index], ev.Delta.PartialJSON...)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := st.Err(); err != nil {
		return nil, out.Failed(err)
	}
	if !stopped {
		// The connection ended cleanly but the answer did not: a proxy or the provider gave up.
		return nil, out.Failed(fmt.Errorf("the stream ended before message_stop: %w", io.ErrUnexpectedEOF))
	}
	return fromMessage(&msg, inputs), nil
}

func (b *Backend) logInfo(msg string, args ...any) {
	b.opts.Logger.Info(msg, append([]any{"provider", Provider}, args...)...)
}

// classify maps SDK errors to the retry policy's terms.
func classify(err error) call.Failure {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		f := call.Failure{Status: apiErr.StatusCode, Transient: call.StatusTransient(apiErr.StatusCode)}
		if apiErr.StatusCode == http.StatusOK {
			// An error event inside a stream (overloaded_error, api_error): the provider failed
			// mid-answer, as a 5xx would have before it.
			f.Status, f.Transient = 0, apiErr.Type() != "invalid_request_error"
		}
		if apiErr.Response != nil {
			f.RetryAfter = call.RetryAfter(apiErr.Response.Header)
		}
		return f
	}
	return call.Failure{Transient: call.NetTransient(err)}
}
