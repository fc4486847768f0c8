// Package anthropic is the Backend for Anthropic's Messages API, built on the official Go SDK.
//
// It owns the wire side of prompt caching: it turns the request's cache marks (system blocks,
// the tool list, messages) into cache_control breakpoints, leaves out a mark whose prompt
// prefix is shorter than the model's minimum cacheable length (logging why), keeps at most
// four (dropping the earliest, so the newest message's always stays), and sends none when
// llm.cache is off. Transient errors are retried by skein's one policy (the SDK's own retries
// are disabled), a reply cut at max_tokens is retried once with a larger limit, and every
// attempt has a hard deadline.
package anthropic

import (
	"context"
	"errors"
	"fmt"
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
	resp, err := call.WithMaxTokensRetry(ctx, maxTokens, b.logInfo,
		func(ctx context.Context, maxTokens int) (*llm.Response, error) {
			params.MaxTokens = int64(maxTokens)
			msg, err := call.Do(ctx, b.policy, classify, func(ctx context.Context) (*sdk.Message, error) {
				return b.client.Messages.New(ctx, params)
			})
			if err != nil {
				return nil, err
			}
			return fromMessage(msg), nil
		})
	if err != nil {
		return nil, err
	}
	resp.Latency = time.Since(start)
	return resp, nil
}

func (b *Backend) logInfo(msg string, args ...any) {
	b.opts.Logger.Info(msg, append([]any{"provider", Provider}, args...)...)
}

// classify maps SDK errors to the retry policy's terms.
func classify(err error) call.Failure {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		f := call.Failure{Status: apiErr.StatusCode, Transient: call.StatusTransient(apiErr.StatusCode)}
		if apiErr.Response != nil {
			f.RetryAfter = call.RetryAfter(apiErr.Response.Header)
		}
		return f
	}
	return call.Failure{Transient: call.NetTransient(err)}
}
