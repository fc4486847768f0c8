package retrieve

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func spec(name, desc string, params ...string) protocol.ToolSpec {
	props := map[string]any{}
	for _, p := range params {
		props[p] = map[string]string{"type": "string"}
	}
	schema, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
	return protocol.ToolSpec{Name: name, Description: desc, InputSchema: schema}
}

var catalogue = []protocol.ToolSpec{
	spec("send_slack_message", "Post a message to a Slack channel or a user.", "channel", "text"),
	spec("send_email", "Send an e-mail to recipients with a subject and body.", "to", "subject", "body"),
	spec("list_pods", "List Kubernetes pods in a namespace with restarts.", "namespace", "selector"),
	spec("get_pod_logs", "Fetch the recent log lines of one pod container.", "namespace", "pod"),
	spec("query_db", "Run a read-only SQL query against the billing database.", "sql"),
	spec("get_weather", "Current weather and forecast for a city.", "location"),
	spec("convert_currency", "Convert an amount between two currencies.", "amount", "from_currency", "to_currency"),
}

// countingEmbedder records which texts it was asked to embed.
type countingEmbedder struct {
	embedtest.Hash
	mu    sync.Mutex
	texts []string
	fail  error
	model string
}

func (c *countingEmbedder) fn(ctx context.Context, texts []string) ([][]float32, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return nil, "", c.fail
	}
	c.texts = append(c.texts, texts...)
	v, err := c.Embed(ctx, texts)
	m := c.model
	if m == "" {
		m = c.Model()
	}
	return v, m, err
}

func TestTermsSplitNamesAndStem(t *testing.T) {
	got := terms("send_slack_message: Posts the messages to getPodLogs, e-mail")
	want := []string{"send", "slack", "message", "post", "message", "pod", "log", "email", "mail"}
	if !slices.Equal(got, want) {
		t.Fatalf("terms = %v, want %v", got, want)
	}
}

func TestBM25PrefersMatchingTool(t *testing.T) {
	r := New(nil, 0)
	res := r.Rank(context.Background(), "Post the deploy summary on Slack", catalogue, Options{TopK: 1})
	if res.Mode != "lexical" || res.Err == nil {
		t.Fatalf("mode %s (%v), want lexical with a reason: no embedder", res.Mode, res.Err)
	}
	if !slices.Equal(res.Offered, []string{"send_slack_message"}) {
		t.Fatalf("offered %v, want send_slack_message", res.Offered)
	}
}

func TestHybridRanksAndIsDeterministic(t *testing.T) {
	e := &countingEmbedder{Hash: embedtest.Hash{Dimensions: 128}}
	r := New(e.fn, 0)
	ctx := context.Background()
	a := r.Rank(ctx, "which pods are restarting in the namespace", catalogue, Options{TopK: 2})
	if a.Mode != "hybrid" || a.Err != nil {
		t.Fatalf("mode %s (%v)", a.Mode, a.Err)
	}
	if !slices.Contains(a.Offered, "list_pods") || len(a.Offered) != 2 {
		t.Fatalf("offered %v, want list_pods among 2", a.Offered)
	}
	for range 5 {
		b := r.Rank(ctx, "which pods are restarting in the namespace", catalogue, Options{TopK: 2})
		if !slices.Equal(a.Offered, b.Offered) {
			t.Fatalf("same input, different sets: %v vs %v", a.Offered, b.Offered)
		}
	}
}

// A query that matches nothing scores every tool 0: the tie breaks by name.
func TestTiesBreakByName(t *testing.T) {
	r := New(nil, 0)
	res := r.Rank(context.Background(), "zzz qqq", catalogue, Options{TopK: 3})
	if !slices.Equal(res.Offered, []string{"convert_currency", "get_pod_logs", "get_weather"}) {
		t.Fatalf("offered %v, want the first three names in order", res.Offered)
	}
}

func TestAlwaysIncludeAndBoost(t *testing.T) {
	r := New(nil, 0)
	res := r.Rank(context.Background(), "Post the deploy summary on Slack", catalogue,
		Options{TopK: 2, Always: []string{"query_db", "not_in_catalogue"}, Boost: map[string]float64{"get_weather": 1}})
	want := []string{"query_db", "get_weather", "send_slack_message"}
	if !slices.Equal(res.Offered, want) {
		t.Fatalf("offered %v, want %v (always first, then the boosted tool, then the best match)", res.Offered, want)
	}
}

// Tool vectors are cached by manifest content: a second ranking embeds only the query, and a
// changed description is embedded again.
func TestEmbeddingCacheByContent(t *testing.T) {
	e := &countingEmbedder{Hash: embedtest.Hash{Dimensions: 64}}
	r := New(e.fn, 0)
	ctx := context.Background()
	r.Rank(ctx, "first", catalogue, Options{TopK: 2})
	if len(e.texts) != len(catalogue)+1 || r.Cached() != len(catalogue) {
		t.Fatalf("first ranking embedded %d texts, cached %d; want %d and %d", len(e.texts), r.Cached(), len(catalogue)+1, len(catalogue))
	}
	e.texts = nil
	r.Rank(ctx, "second", catalogue, Options{TopK: 2})
	if !slices.Equal(e.texts, []string{"second"}) {
		t.Fatalf("second ranking embedded %v, want only the query", e.texts)
	}
	changed := slices.Clone(catalogue)
	changed[0].Description = "Post a message to a Slack channel, a user or a thread."
	e.texts = nil
	r.Rank(ctx, "third", changed, Options{TopK: 2})
	if len(e.texts) != 2 || e.texts[1] != Document(changed[0]) {
		t.Fatalf("after a description change embedded %v, want the query and the changed tool", e.texts)
	}
	// Another model's vectors are not comparable: everything is embedded again.
	e.model, e.texts = "other-model", nil
	r.Rank(ctx, "fourth", changed, Options{TopK: 2})
	// (The query alone first, which is how the change shows, then everything.)
	if len(e.texts) != 1+len(catalogue)+1 {
		t.Fatalf("after a model change embedded %d texts, want %d", len(e.texts), 1+len(catalogue)+1)
	}
}

func TestCacheIsBounded(t *testing.T) {
	e := &countingEmbedder{Hash: embedtest.Hash{Dimensions: 16}}
	r := New(e.fn, 5)
	r.Rank(context.Background(), "q", catalogue, Options{TopK: 2})
	if r.Cached() > 5 {
		t.Fatalf("cache holds %d vectors, limit 5", r.Cached())
	}
}

// When the embedder fails the ranking still happens, by BM25, and says why.
func TestEmbedderDownFallsBackToBM25(t *testing.T) {
	e := &countingEmbedder{fail: errors.New("memoryd embed: no responders")}
	r := New(e.fn, 0)
	res := r.Rank(context.Background(), "Post the deploy summary on Slack", catalogue, Options{TopK: 1})
	if res.Mode != "lexical" || res.Err == nil || res.Err.Error() != "memoryd embed: no responders" {
		t.Fatalf("mode %s, err %v; want lexical with the embedder's error", res.Mode, res.Err)
	}
	if !slices.Equal(res.Offered, []string{"send_slack_message"}) {
		t.Fatalf("offered %v", res.Offered)
	}
}

func TestSearchExcludesAndSkipsZero(t *testing.T) {
	r := New(nil, 0)
	got, _ := r.Search(context.Background(), "pod logs", catalogue, []string{"get_pod_logs"}, 5)
	if !slices.Equal(got, []string{"list_pods"}) {
		t.Fatalf("search = %v, want list_pods only (get_pod_logs excluded, the rest score 0)", got)
	}
}

func TestDocumentNamesParameters(t *testing.T) {
	d := Document(catalogue[6])
	want := "convert currency: Convert an amount between two currencies. Parameters: amount, from_currency, to_currency."
	if d != want {
		t.Fatalf("document %q, want %q", d, want)
	}
	a := catalogue[0]
	a.Agent = "helper"
	if Key(a) == Key(catalogue[0]) {
		t.Fatal("an agent and a tool of the same text share a cache key")
	}
}
