package executor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"sort"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/llm/scripted"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
)

// catalogTask is one task of testdata/catalog/tasks.yaml.
type catalogTask struct {
	Task  string `yaml:"task"`
	Needs []struct {
		Tool string `yaml:"tool"`
		Find string `yaml:"find"`
	} `yaml:"needs"`
}

// toolCatalog is the benchmark's catalogue: the cost scenario's seven tools and the 67 tools of
// testdata/catalog/tools, with the tasks that need them.
type toolCatalog struct {
	dirs  []string
	specs []protocol.ToolSpec
	tasks []catalogTask
}

func loadCatalog(t testing.TB) toolCatalog {
	t.Helper()
	c := toolCatalog{dirs: []string{testdata(t, "scenario", "tools"), testdata(t, "catalog", "tools")}}
	ts, err := tools.LoadDirs(c.dirs, nil)
	if err != nil {
		t.Fatalf("catalogue: %v", err)
	}
	for _, tl := range ts {
		c.specs = append(c.specs, tl.Spec())
	}
	sort.Slice(c.specs, func(i, j int) bool { return c.specs[i].Name < c.specs[j].Name })
	data, err := os.ReadFile(testdata(t, "catalog", "tasks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tasks []catalogTask `yaml:"tasks"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("tasks: %v", err)
	}
	c.tasks = doc.Tasks
	return c
}

func (c toolCatalog) names() []string {
	out := make([]string, len(c.specs))
	for i, s := range c.specs {
		out[i] = s.Name
	}
	return out
}

var (
	miniOnce sync.Once
	mini     embed.Embedder
	miniErr  error
)

// realEmbedder is the MiniLM model memoryd uses, loaded once per test binary.
func realEmbedder(t testing.TB) embed.Embedder {
	t.Helper()
	miniOnce.Do(func() { mini, miniErr = minilm.Open(minilm.Options{}) })
	if miniErr != nil {
		if errors.Is(miniErr, minilm.ErrNotInstalled) && !devenv.Required() {
			devtest.Missing(t, "the MiniLM model")
		}
		t.Fatalf("minilm: %v", miniErr)
	}
	return mini
}

// serveEmbed answers memoryd's embed endpoint over the mesh's NATS with a real embedder: the
// one operation of memoryd the executor uses for tool retrieval.
func serveEmbed(t *testing.T, m *mesh, emb embed.Embedder) {
	t.Helper()
	sub, err := m.Conn.NC.QueueSubscribe(m.Names.Memory(protocol.MemEmbed), protocol.QueueMemoryd, func(msg *nats.Msg) {
		var req protocol.MemoryEmbedRequest
		rep := protocol.MemoryEmbedReply{Model: emb.Model()}
		if err := protocol.Unmarshal(msg.Data, &req); err != nil {
			rep.Error = err.Error()
		} else if vecs, err := emb.Embed(context.Background(), req.Texts); err != nil {
			rep.Error = err.Error()
		} else {
			rep.Vectors = vecs
		}
		data, _ := protocol.Marshal(&rep)
		_ = msg.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// catalogScript is the scripted model of the tool-catalogue benchmark: one set of rules per
// task, told apart by the task that opens the conversation. For each tool the task needs, in
// order, it calls the tool while it is offered (with arguments built from its schema); when the
// tool is not offered it asks find_tools with the task's `find` query, once; when that did not
// bring it either, it says so and stops, and the benchmark counts a miss. After the last needed
// tool answered it replies with text.
func catalogScript(t testing.TB, c toolCatalog) llm.Backend {
	t.Helper()
	type when struct {
		Any   string `yaml:"any,omitempty"`
		Tools string `yaml:"tools,omitempty"`
	}
	type call struct {
		Name string         `yaml:"name"`
		Args map[string]any `yaml:"args"`
	}
	type reply struct {
		Text      string `yaml:"text,omitempty"`
		ToolCalls []call `yaml:"tool_calls,omitempty"`
	}
	type rule struct {
		When  when  `yaml:"when"`
		Reply reply `yaml:"reply"`
		Times int   `yaml:"times,omitempty"`
	}
	specs := map[string]protocol.ToolSpec{}
	for _, s := range c.specs {
		specs[s.Name] = s
	}
	var rules []rule
	for _, task := range c.tasks {
		// The conversation as the scripted model renders it starts with the task; a call shows as
		// its tool's name and arguments at the start of a line.
		opened := `(?s)\A\nuser:\n` + regexp.QuoteMeta(task.Task) + `\n`
		called := func(tool string) string { return opened + `.*\n` + regexp.QuoteMeta(tool) + ` \{` }
		last := task.Needs[len(task.Needs)-1].Tool
		rules = append(rules, rule{When: when{Any: called(last)}, Reply: reply{Text: "Done: " + task.Task}})
		for i := len(task.Needs) - 1; i >= 0; i-- {
			n := task.Needs[i]
			spec, ok := specs[n.Tool]
			if !ok {
				t.Fatalf("task %q needs %s, which the catalogue does not have", task.Task, n.Tool)
			}
			progress := opened
			if i > 0 {
				progress = called(task.Needs[i-1].Tool)
			}
			rules = append(rules,
				rule{When: when{Any: progress, Tools: `(?m)^` + regexp.QuoteMeta(n.Tool) + `$`},
					Reply: reply{ToolCalls: []call{{Name: n.Tool, Args: exampleArgs(t, spec.InputSchema)}}}},
				rule{When: when{Any: progress}, Times: 1,
					Reply: reply{ToolCalls: []call{{Name: protocol.ToolFindTools, Args: map[string]any{"query": n.Find}}}}},
				rule{When: when{Any: progress}, Reply: reply{Text: "None of my tools can " + n.Find + "."}})
		}
	}
	data, err := yaml.Marshal(map[string]any{"rules": rules})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scripted.Parse("catalog script", data)
	if err != nil {
		t.Fatal(err)
	}
	return scripted.FromScript(s)
}

// exampleArgs are arguments a tool's input_schema accepts: each required property with the
// first enum value, the minimum, or a plain value of its type.
func exampleArgs(t testing.TB, schema json.RawMessage) map[string]any {
	t.Helper()
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	out := map[string]any{}
	for _, name := range s.Required {
		var p struct {
			Type    any             `json:"type"`
			Enum    []any           `json:"enum"`
			Minimum *float64        `json:"minimum"`
			Items   json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(s.Properties[name], &p); err != nil {
			t.Fatalf("schema of %s: %v", name, err)
		}
		typ, _ := p.Type.(string)
		if list, ok := p.Type.([]any); ok && len(list) > 0 {
			typ, _ = list[0].(string)
		}
		switch {
		case len(p.Enum) > 0:
			out[name] = p.Enum[0]
		case (typ == "integer" || typ == "number") && p.Minimum != nil:
			out[name] = *p.Minimum
		case typ == "integer" || typ == "number":
			out[name] = 1
		case typ == "boolean":
			out[name] = true
		case typ == "array":
			out[name] = []any{}
		case typ == "object":
			out[name] = exampleArgs(t, s.Properties[name])
		default:
			out[name] = "example " + name
		}
	}
	return out
}
