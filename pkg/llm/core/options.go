package core

import (
	"log/slog"
	"net/http"
	"time"
)

// Options tune a backend beyond what agent.yaml says. Backends take them as variadic Option
// values; the zero Options is valid.
type Options struct {
	// Logger receives operational notes (a cache marker skipped, a retry). Default: discard.
	Logger *slog.Logger
	// HTTPClient carries the provider calls (tests, proxies). Default: a plain client.
	HTTPClient *http.Client
	// RetryInitial and RetryMax bound the exponential backoff between retries of transient
	// errors; a provider's retry-after hint raises a wait, never lowers it.
	RetryInitial time.Duration
	RetryMax     time.Duration
	// OnRetry, when set, is told of each retry before its wait (observability and tests).
	OnRetry func(attempt int, wait time.Duration, err error)
}

// Option sets one field of Options.
type Option func(*Options)

// WithLogger sets the backend's logger.
func WithLogger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }

// WithHTTPClient sets the HTTP client used for provider calls.
func WithHTTPClient(c *http.Client) Option { return func(o *Options) { o.HTTPClient = c } }

// WithRetryWait sets the backoff bounds between retries.
func WithRetryWait(initial, max time.Duration) Option {
	return func(o *Options) { o.RetryInitial, o.RetryMax = initial, max }
}

// WithRetryNotify registers a function told of every retry.
func WithRetryNotify(f func(attempt int, wait time.Duration, err error)) Option {
	return func(o *Options) { o.OnRetry = f }
}

// BuildOptions applies opts over the defaults.
func BuildOptions(opts ...Option) Options {
	o := Options{RetryInitial: 500 * time.Millisecond, RetryMax: 30 * time.Second}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = 500 * time.Millisecond
	}
	if o.RetryMax < o.RetryInitial {
		o.RetryMax = o.RetryInitial
	}
	return o
}
