// Package redact removes secrets from text before it is stored where others read it: trace
// events, logs, mined guidelines. It knows the shapes of common secrets (provider keys, bearer
// tokens, password=... pairs, NATS seeds and JWTs, passwords in URLs) and the actual values of
// this process's secret-looking environment variables, so a key with no known shape is caught
// too.
package redact

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Mask replaces a secret.
const Mask = "[REDACTED]"

// minValueLen is the shortest environment value treated as a secret: shorter ones ("1", "yes")
// would mask ordinary words.
const minValueLen = 8

// A pattern runs only when its cheap literal test passes: most text holds no secret, and
// trace events are many.
type pattern struct {
	re   *regexp.Regexp
	repl string
	pre  func(s, lower string) bool
}

func has(subs ...string) func(s, lower string) bool {
	return func(s, _ string) bool {
		for _, x := range subs {
			if strings.Contains(s, x) {
				return true
			}
		}
		return false
	}
}

func hasLower(subs ...string) func(s, lower string) bool {
	return func(_, lower string) bool {
		for _, x := range subs {
			if strings.Contains(lower, x) {
				return true
			}
		}
		return false
	}
}

var patterns = []pattern{
	// PEM-like blocks of NATS creds files: the JWT and the seed.
	{regexp.MustCompile(`-----BEGIN [A-Z ]*(JWT|SEED|PRIVATE KEY)-----[\s\S]*?(-----END [A-Z ]*-----|$)`), Mask, has("-----BEGIN")},
	// Provider keys: Anthropic, OpenAI (sk-proj-..., sk-...), generic sk_live etc.
	{regexp.MustCompile(`\bsk-ant-[A-Za-z0-9_\-]{8,}`), Mask, has("sk-ant-")},
	{regexp.MustCompile(`\b(sk|rk)[-_](live|test|proj|svcacct|admin)?[-_]?[A-Za-z0-9_\-]{16,}`), Mask, has("sk-", "sk_", "rk-", "rk_")},
	{regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}`), Mask, has("gh")},
	{regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9\-]{10,}`), Mask, has("xox")},
	{regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`), Mask, has("AKIA")},
	{regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{30,}`), Mask, has("AIza")},
	{regexp.MustCompile(`\bskh_[0-9a-f]{16,}`), Mask, has("skh_")}, // skein's HTTP token
	// NATS nkey seeds (S + type + base32) and JWTs.
	{regexp.MustCompile(`\bS[UACONPX][A-Z2-7]{54,}\b`), Mask, has("SU", "SA", "SC", "SO", "SN", "SP", "SX")},
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`), Mask, has("eyJ")},
	// Authorization headers.
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/\-]{8,}=*`), "$1 " + Mask, hasLower("bearer", "basic")},
	// key=value and key: value pairs whose key names a secret.
	{regexp.MustCompile(`(?i)\b((?:[a-z0-9_\-]*[_\-])?(?:password|passwd|passphrase|secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key|auth|credentials?))("?\s*[=:]\s*)(["']?)[^\s"'&,;}\]]+`), "$1$2$3" + Mask,
		func(s, lower string) bool {
			return strings.ContainsAny(s, "=:") && hasLower("pass", "secret", "token", "key", "auth", "credential")(s, lower)
		}},
	// user:password@ in URLs (keep last: URL uses it).
	{regexp.MustCompile(`\b([a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@"']*):[^/\s@"']+@`), "$1:" + Mask + "@",
		func(s, _ string) bool { return strings.Contains(s, "://") && strings.Contains(s, "@") }},
}

// secretName says which environment variables hold secrets.
var secretName = regexp.MustCompile(`(?i)(key|token|secret|password|passwd|credential|creds|seed|auth)`)

var (
	mu     sync.RWMutex
	values []string // longest first, so a value containing another is masked whole
)

func init() {
	for _, kv := range os.Environ() {
		name, v, _ := strings.Cut(kv, "=")
		if secretName.MatchString(name) && !strings.HasSuffix(strings.ToUpper(name), "_ENV") {
			AddValues(v)
		}
	}
}

// AddValues registers literal secret values (a key read from a file, a token passed by flag) to
// be masked wherever they appear. Values shorter than 8 bytes are ignored.
func AddValues(vs ...string) {
	mu.Lock()
	defer mu.Unlock()
	for _, v := range vs {
		v = strings.TrimSpace(v)
		if len(v) < minValueLen || slices.Contains(values, v) {
			continue
		}
		values = append(values, v)
	}
	slices.SortFunc(values, func(a, b string) int { return len(b) - len(a) })
}

// AddEnv registers the values of the named environment variables (for example the
// llm.api_key_env of a config, whatever its name).
func AddEnv(names ...string) {
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok {
			AddValues(v)
		}
	}
}

// String returns s with every secret replaced by Mask.
func String(s string) string {
	if s == "" {
		return s
	}
	mu.RLock()
	for _, v := range values {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Mask)
		}
	}
	mu.RUnlock()
	lower := strings.ToLower(s)
	for _, p := range patterns {
		if p.pre(s, lower) {
			s = p.re.ReplaceAllString(s, p.repl)
			lower = strings.ToLower(s)
		}
	}
	return s
}

// suspect reports whether s could hold anything String or a secret key name would mask: one pass
// of cheap tests, so a large clean tool result is not decoded and walked.
func suspect(s string) bool {
	lower := strings.ToLower(s)
	for _, p := range patterns {
		if p.pre(s, lower) {
			return true
		}
	}
	for _, w := range []string{"pass", "secret", "token", "key", "auth", "credential", "seed", "pwd"} {
		if strings.Contains(lower, w) {
			return true
		}
	}
	mu.RLock()
	defer mu.RUnlock()
	for _, v := range values {
		if strings.Contains(s, v) {
			return true
		}
	}
	return false
}

// secretKey says which JSON object keys hold secrets: their values are masked whole.
var secretKey = regexp.MustCompile(`(?i)^([a-z0-9_\-]*[_\-])?(password|passwd|pwd|passphrase|secret|token|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key|authorization|auth|credentials?|seed)$`)

// JSON returns raw with every string redacted and the values of secret-named keys masked. Raw
// that is not JSON is redacted as text and returned as a JSON string, so the result is always
// valid JSON.
func JSON(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return raw
	}
	if !suspect(string(raw)) {
		return raw // nothing any pattern, value or secret key name could match
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		b, _ := json.Marshal(String(string(raw)))
		return b
	}
	changed := false
	v = walk(v, &changed)
	if !changed {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}

func walk(v any, changed *bool) any {
	switch x := v.(type) {
	case string:
		r := String(x)
		if r != x {
			*changed = true
		}
		return r
	case []any:
		for i := range x {
			x[i] = walk(x[i], changed)
		}
		return x
	case map[string]any:
		for k, val := range x {
			if s, isStr := val.(string); isStr && secretKey.MatchString(k) {
				if s != Mask {
					x[k] = Mask
					*changed = true
				}
				continue
			}
			x[k] = walk(val, changed)
		}
		return x
	}
	return v
}

// URL masks the password of a URL's user info ("nats://user:pass@host" →
// "nats://user:[REDACTED]@host"), for printing or logging server addresses. Several URLs
// separated by commas are each masked.
func URL(s string) string {
	return patterns[len(patterns)-1].re.ReplaceAllString(s, patterns[len(patterns)-1].repl)
}
