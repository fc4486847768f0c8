// Package call holds the call policy shared by the HTTP backends: one retry policy for
// transient errors (cenkalti/backoff, honouring retry-after), a hard per-attempt deadline,
// the single larger-limit retry of a reply cut at max_tokens, and what a streamed answer may
// retry: an attempt that fails before any of its text reached the caller is retried like any
// failed call; one that fails after is not (the caller would see the answer twice), and its
// error says so.
package call

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	llm "github.com/skein-mesh/skein/pkg/llm/core"
)

// Policy is how one backend retries.
type Policy struct {
	Provider   string
	MaxRetries int           // retries after the first attempt
	Timeout    time.Duration // hard deadline of one attempt
	Opts       llm.Options
}

// Defaults used when agent.yaml leaves a field at zero.
const (
	DefaultMaxRetries = 4
	DefaultTimeout    = 120 * time.Second
	// maxRetryAfter caps a provider's retry-after hint so a bogus header cannot park a
	// session; the caller's context still bounds the whole call.
	maxRetryAfter = 2 * time.Minute
)

// NewPolicy resolves config values: maxRetries 0 means the default, negative means none;
// timeoutS <= 0 means the default.
func NewPolicy(provider string, maxRetries int, timeoutS float64, opts llm.Options) Policy {
	switch {
	case maxRetries == 0:
		maxRetries = DefaultMaxRetries
	case maxRetries < 0:
		maxRetries = 0
	}
	timeout := DefaultTimeout
	if timeoutS > 0 {
		timeout = time.Duration(timeoutS * float64(time.Second))
	}
	return Policy{Provider: provider, MaxRetries: maxRetries, Timeout: timeout, Opts: opts}
}

// Failure describes an attempt's error for the policy: its HTTP status (0 if none), whether
// it is worth retrying, and the provider's retry-after hint.
type Failure struct {
	Status     int
	Transient  bool
	RetryAfter time.Duration
}

// Classifier maps an SDK error to a Failure.
type Classifier func(error) Failure

// retryAfterBackOff raises the exponential wait to the provider's retry-after hint.
type retryAfterBackOff struct {
	inner backoff.BackOff
	hint  *time.Duration
}

func (b *retryAfterBackOff) NextBackOff() time.Duration {
	d := b.inner.NextBackOff()
	if d == backoff.Stop {
		return d
	}
	if h := *b.hint; h > d {
		d = min(h, maxRetryAfter)
	}
	return d
}

func (b *retryAfterBackOff) Reset() { b.inner.Reset() }

// Do runs op until it succeeds, fails permanently, or the retries run out. Each attempt gets
// its own deadline (Policy.Timeout); an attempt that times out while ctx is alive is retried.
// The error returned is an *llm.APIError.
func Do[T any](ctx context.Context, p Policy, classify Classifier, op func(context.Context) (T, error)) (T, error) {
	var (
		out      T
		hint     time.Duration
		attempts int
		last     Failure
	)
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = p.Opts.RetryInitial
	eb.MaxInterval = p.Opts.RetryMax
	eb.MaxElapsedTime = 0 // bounded by MaxRetries and the caller's context instead
	var b backoff.BackOff = &retryAfterBackOff{inner: eb, hint: &hint}
	b = backoff.WithContext(backoff.WithMaxRetries(b, uint64(p.MaxRetries)), ctx)

	operation := func() error {
		attempts++
		actx, cancel := context.WithTimeout(ctx, p.Timeout)
		defer cancel()
		v, err := op(actx)
		if err == nil {
			out = v
			return nil
		}
		if ctx.Err() != nil {
			last = Failure{}
			return backoff.Permanent(err)
		}
		var cut *CutError
		if errors.As(err, &cut) {
			last = classify(cut.Err)
			last.Transient = false
			return backoff.Permanent(err)
		}
		last = classify(err)
		if !last.Transient && actx.Err() != nil {
			// Our own per-attempt deadline fired: the provider is slow, not wrong.
			last.Transient = true
			err = errors.Join(err, errors.New("attempt deadline exceeded"))
		}
		hint = last.RetryAfter
		if !last.Transient {
			return backoff.Permanent(err)
		}
		return err
	}
	notify := func(err error, wait time.Duration) {
		p.Opts.Logger.Warn("retrying model call", "provider", p.Provider, "attempt", attempts,
			"wait", wait, "status", last.Status, "err", err)
		if p.Opts.OnRetry != nil {
			p.Opts.OnRetry(attempts, wait, err)
		}
	}
	if err := backoff.RetryNotify(operation, b, notify); err != nil {
		var zero T
		return zero, &llm.APIError{Provider: p.Provider, Status: last.Status, Attempts: attempts,
			Transient: last.Transient, Err: err}
	}
	return out, nil
}

// StatusTransient reports whether an HTTP status is worth retrying: rate limits (429),
// request timeouts (408), overload (529) and server errors.
func StatusTransient(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusRequestTimeout ||
		status == 529 || status >= 500
}

// RetryAfter reads retry-after-ms or retry-after (seconds or an HTTP date).
func RetryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// NetTransient reports whether an error without an HTTP answer is worth retrying: a reset or
// refused connection, an early EOF, a network timeout.
func NetTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}

// Growth of the output limit for the one retry of a reply cut at max_tokens, and its cap.
const (
	maxTokensGrowth = 2
	maxTokensCap    = 32768
)

// WithMaxTokensRetry calls complete once; if the reply was cut at max_tokens and carries no
// usable tool call, it calls again once with a larger limit (2x, capped at 32768 or the
// original limit if that is higher). The cut reply's tokens are added to the returned
// Usage, because they were billed. If the larger call fails, the cut reply is returned.
// out.Restart tells a streaming caller, before the second call, that the text it was shown
// is void.
func WithMaxTokensRetry(ctx context.Context, maxTokens int, log func(msg string, args ...any), out *Output,
	complete func(ctx context.Context, maxTokens int) (*llm.Response, error)) (*llm.Response, error) {
	first, err := complete(ctx, maxTokens)
	if err != nil || first.StopReason != llm.StopMaxTokens || usableToolCall(first) {
		return first, err
	}
	bigger := min(maxTokens*maxTokensGrowth, max(maxTokensCap, maxTokens))
	if bigger <= maxTokens {
		return first, nil
	}
	log("reply cut at max_tokens, retrying once with a larger limit", "max_tokens", maxTokens, "retry_max_tokens", bigger)
	out.Restart()
	second, err := complete(ctx, bigger)
	if err != nil {
		log("larger max_tokens retry failed; returning the cut reply", "err", err)
		return first, nil
	}
	second.Usage = second.Usage.Add(first.Usage)
	second.Latency += first.Latency
	return second, nil
}

func usableToolCall(r *llm.Response) bool {
	for _, c := range r.ToolCalls {
		if c.ValidArgs() {
			return true
		}
	}
	return false
}

// Output passes a streamed answer's text on to the caller (Request.Stream) and counts what it
// passed since the answer (re)started, so that a failed attempt knows whether the caller saw
// part of it. The zero of a nil sink counts nothing: nobody saw anything.
type Output struct {
	sink  func(llm.Delta)
	shown int
}

// NewOutput streams to sink (nil: the caller does not stream).
func NewOutput(sink func(llm.Delta)) *Output { return &Output{sink: sink} }

// Text passes s on.
func (o *Output) Text(s string) {
	if s == "" || o.sink == nil {
		return
	}
	o.shown += len(s)
	o.sink(llm.Delta{Text: s})
}

// Restart tells the caller that the text it was shown is void: the answer starts again.
func (o *Output) Restart() {
	if o.shown > 0 {
		o.sink(llm.Delta{Restart: true})
	}
	o.shown = 0
}

// Failed is the error of an attempt that failed with err: err itself when the caller saw none
// of the attempt's text, so the attempt is retried as any failed call; else a *CutError,
// which Do does not retry.
func (o *Output) Failed(err error) error {
	if o.shown == 0 {
		return err
	}
	return &CutError{Shown: o.shown, Err: err}
}

// CutError is a streamed answer that broke after part of it reached the caller. It is not
// retried: the caller would see that part twice.
type CutError struct {
	Shown int // bytes of text the caller saw
	Err   error
}

func (e *CutError) Error() string {
	return fmt.Sprintf("the answer's stream broke after %d bytes of text had been streamed (%v); not retried, so that text is not shown twice", e.Shown, e.Err)
}

func (e *CutError) Unwrap() error { return e.Err }
