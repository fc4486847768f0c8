package executor

import (
	"context"
	"errors"
	"os"
	"sort"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
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
