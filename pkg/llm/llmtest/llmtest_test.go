package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

var long = strings.Repeat("stable instructions for the agent ", 300) // ~1,500 tokens

func msgReq(system string, marks int) string {
	var blocks []string
	for i := 0; i < marks; i++ {
		blocks = append(blocks, fmt.Sprintf(`{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}`, fmt.Sprint(i, system)))
	}
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":50,"system":[%s],"messages":[{"role":"user","content":"hi"}]}`, strings.Join(blocks, ","))
}

func TestAnthropicCacheRules(t *testing.T) {
	s := NewAnthropic(t, Script{})
	// Under the model's minimum: nothing is cached.
	code, out := post(t, s.URL+"/v1/messages", msgReq("short", 1))
	if u := out["usage"].(map[string]any); code != 200 || u["cache_creation_input_tokens"].(float64) != 0 {
		t.Fatalf("short prefix: %d %v", code, out)
	}
	// Over it: written once, then read.
	_, out = post(t, s.URL+"/v1/messages", msgReq(long, 1))
	if u := out["usage"].(map[string]any); u["cache_creation_input_tokens"].(float64) < 1024 || u["cache_read_input_tokens"].(float64) != 0 {
		t.Fatalf("first: %v", u)
	}
	_, out = post(t, s.URL+"/v1/messages", msgReq(long, 1))
	if u := out["usage"].(map[string]any); u["cache_read_input_tokens"].(float64) < 1024 || u["cache_creation_input_tokens"].(float64) != 0 {
		t.Fatalf("second: %v", u)
	}
	s.ResetCache()
	_, out = post(t, s.URL+"/v1/messages", msgReq(long, 1))
	if u := out["usage"].(map[string]any); u["cache_read_input_tokens"].(float64) != 0 {
		t.Fatalf("after reset: %v", u)
	}
	// More than four markers is the provider's 400.
	code, out = post(t, s.URL+"/v1/messages", msgReq(long, 5))
	if code != 400 || !strings.Contains(fmt.Sprint(out), "maximum of 4 blocks") {
		t.Fatalf("5 markers: %d %v", code, out)
	}
}

func TestPairingValidated(t *testing.T) {
	a := NewAnthropic(t, Script{})
	code, out := post(t, a.URL+"/v1/messages", `{"model":"m","max_tokens":10,"messages":[
		{"role":"user","content":"go"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"r"}]}]}`)
	if code != 400 || !strings.Contains(fmt.Sprint(out), "tool_use_id") {
		t.Fatalf("anthropic pairing: %d %v", code, out)
	}
	o := NewOpenAI(t, Script{})
	code, out = post(t, o.URL+"/chat/completions", `{"model":"m","messages":[
		{"role":"user","content":"go"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"x","arguments":"{}"}}]},
		{"role":"user","content":"no tool answer"}]}`)
	if code != 400 || !strings.Contains(fmt.Sprint(out), "c1") {
		t.Fatalf("openai pairing: %d %v", code, out)
	}
}
