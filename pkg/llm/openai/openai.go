// Package openai is the Backend for OpenAI chat completions, built on the official Go SDK
// (openai-go/v3). With llm.base_url it talks to any OpenAI-compatible server (Ollama, vLLM,
// llama.cpp); a loopback base_url may run without a key.
//
// Usage mapping: OpenAI reports prompt_tokens including the cached ones, and the cached part
// in prompt_tokens_details.cached_tokens (and, for models that bill cache writes,
// cache_write_tokens). skein's Usage follows Anthropic's convention, where input_tokens is
// only the part billed at the full input price, so:
//
//	CacheReadInputTokens     = cached_tokens
//	CacheCreationInputTokens = cache_write_tokens
//	InputTokens              = prompt_tokens - cached_tokens - cache_write_tokens
//
// Each figure is then priced at its own rate and the total cost is right; summing the three
// gives back prompt_tokens. Cache marks in the Request are ignored: OpenAI caches prefixes by
// itself.
//
// Tool-call arguments that are not valid JSON are returned as the raw text in ToolCall.Args
// (the executor turns them into a tool error the model sees), never as an error.
//
// Every call streams (the SDK's NewStreaming with stream_options.include_usage): the text goes
// to Request.Stream as it arrives, the SDK's accumulator joins the chunks into the same
// completion the non-streaming call returns, and the usage is taken whole from the stream's
// usage chunk. A stream without a finish reason is a failed attempt, never a shorter answer;
// so is one from OpenAI's own API without its usage chunk. A compatible server that sends no
// usage in streams is logged once, and its calls count no tokens.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/skein-mesh/skein/pkg/config"
	llm "github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/llm/internal/call"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Provider is this backend's name in agent.yaml and in errors.
const Provider = "openai"

const defaultMaxTokens = 1024

// Backend calls chat completions.
type Backend struct {
	client  sdk.Client
	cfg     config.LLM
	opts    llm.Options
	policy  call.Policy
	noUsage sync.Once
}

var _ llm.Backend = (*Backend)(nil)

// New builds the backend; the key comes from cfg.APIKeyEnv (default OPENAI_API_KEY).
func New(cfg config.LLM, opts ...llm.Option) (*Backend, error) {
	o := llm.BuildOptions(opts...)
	key := os.Getenv(llm.KeyEnv(cfg))
	if key == "" && llm.IsLoopback(cfg.BaseURL) {
		// Local servers ignore the key, but the SDK wants one to send.
		key = "unused"
	}
	reqOpts := []option.RequestOption{
		option.WithAPIKey(key),
		option.WithHTTPClient(o.HTTPClient),
		option.WithMaxRetries(0), // skein's retry policy is the only one
	}
	if cfg.BaseURL != "" {
		reqOpts = append(reqOpts, option.WithBaseURL(cfg.BaseURL))
	}
	return &Backend{client: sdk.NewClient(reqOpts...), cfg: cfg, opts: o,
		policy: call.NewPolicy(Provider, cfg.MaxRetries, cfg.TimeoutS, o)}, nil
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
	params, err := buildParams(req)
	if err != nil {
		return nil, fmt.Errorf("%s: building request: %w", Provider, err)
	}
	params.StreamOptions.IncludeUsage = sdk.Bool(true)
	out := call.NewOutput(req.Stream)
	resp, err := call.WithMaxTokensRetry(ctx, maxTokens, b.logInfo, out,
		func(ctx context.Context, maxTokens int) (*llm.Response, error) {
			// OpenAI's own API wants max_completion_tokens (o-series reject max_tokens);
			// compatible servers widely understand only max_tokens.
			if official(b.cfg.BaseURL) {
				params.MaxCompletionTokens = sdk.Int(int64(maxTokens))
			} else {
				params.MaxTokens = sdk.Int(int64(maxTokens))
			}
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

// stream makes one streamed call and accumulates its chunks into the answer.
func (b *Backend) stream(ctx context.Context, params sdk.ChatCompletionNewParams, out *call.Output) (*llm.Response, error) {
	st := b.client.Chat.Completions.NewStreaming(ctx, params)
	defer st.Close()
	var acc sdk.ChatCompletionAccumulator
	var usage *sdk.CompletionUsage
	finished := false
	for st.Next() {
		chunk := st.Current()
		if !acc.AddChunk(chunk) {
			return nil, out.Failed(fmt.Errorf("stream chunk %s does not continue the answer", chunk.ID))
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			out.Text(ch.Delta.Content)
			if ch.FinishReason != "" {
				finished = true
			}
		}
		if chunk.JSON.Usage.Valid() {
			// The accumulator adds the counts it knows and drops cache_write_tokens; the usage
			// chunk is the whole figure.
			u := chunk.Usage
			usage = &u
		}
	}
	if err := st.Err(); err != nil {
		return nil, out.Failed(err)
	}
	switch {
	case !finished:
		return nil, out.Failed(fmt.Errorf("the stream ended before a finish reason: %w", io.ErrUnexpectedEOF))
	case usage == nil && official(b.cfg.BaseURL):
		return nil, out.Failed(fmt.Errorf("the stream ended before its usage chunk: %w", io.ErrUnexpectedEOF))
	case usage == nil:
		b.noUsage.Do(func() {
			b.opts.Logger.Warn("the server sends no usage in streamed answers (stream_options.include_usage): its calls count no tokens",
				"provider", Provider, "base_url", b.cfg.BaseURL)
		})
	default:
		acc.Usage = *usage
	}
	return fromCompletion(&acc.ChatCompletion)
}

// official reports whether a base URL is OpenAI's own API.
func official(baseURL string) bool {
	if baseURL == "" {
		return true
	}
	u, err := url.Parse(baseURL)
	return err == nil && strings.HasSuffix(u.Hostname(), "api.openai.com")
}

func (b *Backend) logInfo(msg string, args ...any) {
	b.opts.Logger.Info(msg, append([]any{"provider", Provider}, args...)...)
}

func classify(err error) call.Failure {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		f := call.Failure{Status: apiErr.StatusCode, Transient: call.StatusTransient(apiErr.StatusCode)}
		if apiErr.Response != nil {
			f.RetryAfter = call.RetryAfter(apiErr.Response.Header)
		}
		return f
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		// An error inside a stream: the server failed mid-answer, as a 5xx would have before it.
		return call.Failure{Transient: true}
	}
	return call.Failure{Transient: call.NetTransient(err)}
}

func buildParams(req llm.Request) (sdk.ChatCompletionNewParams, error) {
	p := sdk.ChatCompletionNewParams{Model: shared.ChatModel(req.Model)}
	if len(req.System) > 0 {
		parts := make([]string, len(req.System))
		for i, s := range req.System {
			parts[i] = s.Text
		}
		p.Messages = append(p.Messages, sdk.SystemMessage(strings.Join(parts, "\n\n")))
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		if len(t.InputSchema) > 0 {
			var params shared.FunctionParameters
			if err := json.Unmarshal(t.InputSchema, &params); err != nil {
				return p, fmt.Errorf("tool %q: input_schema is not a JSON object: %w", t.Name, err)
			}
			fn.Parameters = params
		}
		p.Tools = append(p.Tools, sdk.ChatCompletionToolUnionParam{OfFunction: &sdk.ChatCompletionFunctionToolParam{Function: fn}})
	}
	for i, m := range req.Messages {
		switch m.Role {
		case llm.RoleUser:
			// Tool results become "tool" messages, which must directly follow the assistant's
			// calls; any text of the same turn follows them as a user message.
			var text []string
			for _, blk := range m.Content {
				switch blk.Type {
				case llm.BlockToolResult:
					if blk.ToolResult == nil {
						return p, fmt.Errorf("messages[%d]: tool_result block without a result", i)
					}
					p.Messages = append(p.Messages, sdk.ToolMessage(blk.ToolResult.Content, blk.ToolResult.CallID))
				case llm.BlockText:
					text = append(text, blk.Text)
				default:
					return p, fmt.Errorf("messages[%d]: %s block in a user message", i, blk.Type)
				}
			}
			if len(text) > 0 {
				p.Messages = append(p.Messages, sdk.UserMessage(strings.Join(text, "\n\n")))
			}
		case llm.RoleAssistant:
			a := sdk.ChatCompletionAssistantMessageParam{}
			var text []string
			for _, blk := range m.Content {
				switch blk.Type {
				case llm.BlockText:
					text = append(text, blk.Text)
				case llm.BlockToolUse:
					if blk.ToolUse == nil {
						return p, fmt.Errorf("messages[%d]: tool_use block without a call", i)
					}
					a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
						OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{ID: blk.ToolUse.ID,
							Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{
								Name: blk.ToolUse.Name, Arguments: string(blk.ToolUse.Args)}}})
				default:
					return p, fmt.Errorf("messages[%d]: %s block in an assistant message", i, blk.Type)
				}
			}
			if len(text) > 0 {
				a.Content.OfString = sdk.String(strings.Join(text, ""))
			}
			p.Messages = append(p.Messages, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
		default:
			return p, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	return p, nil
}

func fromCompletion(cc *sdk.ChatCompletion) (*llm.Response, error) {
	if len(cc.Choices) == 0 {
		return nil, fmt.Errorf("%s: answer has no choices", Provider)
	}
	ch := cc.Choices[0]
	u := cc.Usage
	cached := u.PromptTokensDetails.CachedTokens
	written := u.PromptTokensDetails.CacheWriteTokens
	r := &llm.Response{Model: cc.Model, Text: ch.Message.Content, Usage: protocol.Usage{
		InputTokens:              max(u.PromptTokens-cached-written, 0),
		OutputTokens:             u.CompletionTokens,
		CacheReadInputTokens:     cached,
		CacheCreationInputTokens: written,
	}}
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		args := tc.Function.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}" // some compatible servers send "" for a call without arguments
		}
		r.ToolCalls = append(r.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Args: json.RawMessage(args)})
	}
	switch ch.FinishReason {
	case "stop":
		r.StopReason = llm.StopEndTurn
		if len(r.ToolCalls) > 0 {
			// Several compatible servers report "stop" for a turn that calls tools.
			r.StopReason = llm.StopToolUse
		}
	case "tool_calls", "function_call":
		r.StopReason = llm.StopToolUse
	case "length":
		r.StopReason = llm.StopMaxTokens
	default:
		r.StopReason = llm.StopOther
	}
	return r, nil
}
