package core

import "strings"

// MaxCacheBreakpoints is Anthropic's limit of cache_control markers in one request.
const MaxCacheBreakpoints = 4

// minCacheable lists, by model id prefix (longest match wins), the shortest prompt prefix in
// tokens that Anthropic will cache. Below it a marker is silently ignored by the provider, so
// the backend leaves it out and logs why.
//
// Sources (checked 2026-11-22): Anthropic's prompt-caching guide as quoted in
// anthropic-sdk-python issue 1194 (4.x and 3.x rows), the "What's new in Claude Opus 4.8" page
// (1,024 for Opus 4.8), and third-party summaries for the 5.x rows. Where sources disagree
// (Opus 4.7: 2,048 or 4,096; Sonnet 4.6: 1,024 or 2,048) the lower figure is used: a marker on
// a too-short prefix costs nothing, while a skipped marker on a cacheable one loses savings.
var minCacheable = map[string]int{
	"claude-opus-5":     512,
	"claude-fable-5":    512,
	"claude-mythos-5":   512,
	"claude-sonnet-5":   1024,
	"claude-opus-4-8":   1024,
	"claude-opus-4-7":   2048,
	"claude-opus-4-6":   4096,
	"claude-opus-4-5":   4096,
	"claude-haiku-4-5":  4096,
	"claude-opus-4":     1024, // 4, 4.1
	"claude-sonnet-4":   1024, // 4, 4.5, 4.6
	"claude-3-7-sonnet": 1024,
	"claude-3-5-sonnet": 1024,
	"claude-3-opus":     1024,
	"claude-3-5-haiku":  2048,
	"claude-3-haiku":    2048,
	"scripted":          0,
}

// DefaultMinCacheable is used for a model not in the table.
const DefaultMinCacheable = 1024

// MinCacheableTokens returns the minimum cacheable prompt length of a model, in tokens.
func MinCacheableTokens(model string) int {
	best, n := -1, DefaultMinCacheable
	for prefix, v := range minCacheable {
		if strings.HasPrefix(model, prefix) && len(prefix) > best {
			best, n = len(prefix), v
		}
	}
	return n
}
