package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
)

// runChat runs `skein chat` in process with stdin and returns what it printed on stdout and stderr.
func runChat(t *testing.T, m *bustest.Mesh, stdin string, args ...string) (string, string, error) {
	t.Helper()
	root := &cobra.Command{Use: "skein", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().String("nats", "", "")
	root.PersistentFlags().StringArray("config", nil, "")
	root.AddCommand(newChatCmd())
	var out, errw bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errw)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"--nats", m.URL, "chat"}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), errw.String(), err
}

// /memory in chat shows what the mesh remembers for the agent, ranked for the query.
func TestChatMemoryShowsWhatTheMeshRemembers(t *testing.T) {
	m := memMesh(t)
	in := filepath.Join(t.TempDir(), "in.jsonl")
	body := `{"agent":"demo","text":"Check the csv path exists before csv_read.","polarity":"avoid","tier":"strategic","tools":["csv_read"]}
{"agent":"other","text":"Never read csv files on Sundays.","polarity":"avoid","tier":"strategic"}
`
	if err := os.WriteFile(in, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, m, "memory", "import", in); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := runChat(t, m, "/memory check the csv path\n/quit\n", "--agent", "demo")
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "Check the csv path exists") || strings.Contains(stderr, "Sundays") {
		t.Fatalf("/memory printed, for agent demo:\n%s", stderr)
	}
	_, stderr, err = runChat(t, m, "/memory\n/frobnicate\n/cancel\n")
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, stderr)
	}
	for _, want := range []string{"memory (embedding model", "unknown command", "nothing is running"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("chat stderr lacks %q:\n%s", want, stderr)
		}
	}
}
