package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// TestRunVerboseShowsTheLearning: two embedded `skein run --verbose` in one $SKEIN_HOME. The
// first retrieves nothing and the miner adds what it learned, saying why; the second is given
// that guideline, with its score and the rule that chose it, and the miner merges the lesson.
func TestRunVerboseShowsTheLearning(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole mesh twice")
	}
	needMiniLM(t)
	root := devtest.RepoRoot(t)
	sum := filepath.Join(root, "examples", "tools", "sum", "sum")
	if _, err := os.Stat(sum); err != nil {
		cmd := exec.Command("go", "build", "-o", "sum", ".")
		cmd.Dir, cmd.Env = filepath.Dir(sum), append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build sum: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("SKEIN_HOME", filepath.Join(dir, ".skein"))
	t.Setenv("SKEIN_NATS_URL", "")
	if err := os.WriteFile("script.yaml", []byte(consoleScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "agent: {name: adder}\nllm: {provider: scripted, model: scripted, script: script.yaml}\n" +
		"tools: {manifest_dirs: [" + filepath.Join(root, "examples", "tools") + "], enabled: [sum]}\n"
	if err := os.WriteFile("agent.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func() (stdout, stderr string) {
		t.Helper()
		rootCmd := &cobra.Command{Use: "skein", SilenceUsage: true, SilenceErrors: true}
		rootCmd.PersistentFlags().String("nats", "", "")
		rootCmd.PersistentFlags().StringArray("config", nil, "")
		rootCmd.PersistentFlags().String("creds", "", "")
		rootCmd.AddCommand(newRunCmd())
		var out, errOut bytes.Buffer
		rootCmd.SetOut(&out)
		rootCmd.SetErr(&errOut)
		rootCmd.SetArgs([]string{"run", "--verbose", "add 2, 3 and 5 with the sum tool"})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := rootCmd.ExecuteContext(ctx); err != nil {
			t.Fatalf("skein run: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}

	out1, err1 := run()
	if !strings.Contains(err1, "memory for step s1: no guideline retrieved") {
		t.Errorf("first run: want no guideline retrieved; stderr:\n%s", err1)
	}
	added := regexp.MustCompile(`miner: added +(\S+) pattern: Add numbers with the sum tool rather than by hand\.\n +why: new lesson: no pattern entry of this agent within similarity`)
	m := added.FindStringSubmatch(out1)
	if m == nil {
		t.Fatalf("first run: want the miner's added decision with its reason; stdout:\n%s", out1)
	}

	out2, err2 := run()
	retrieved := regexp.MustCompile(`memory for step s1: 1 guideline\(s\) retrieved\n +0\.\d{3} tactical +pattern +` + regexp.QuoteMeta(m[1]) +
		` +Add numbers with the sum tool rather than by hand\.\n +why: tool sum named in the task \(similarity 0\.\d\d ≥ floor 0\.30\)`)
	if !retrieved.MatchString(err2) {
		t.Errorf("second run: want the learned guideline with its score and why; stderr:\n%s", err2)
	}
	if !regexp.MustCompile(`miner: merged +` + regexp.QuoteMeta(m[1]) + ` pattern: .*\n +why: 2 distinct sessions now; promotion to strategic at 3`).MatchString(out2) {
		t.Errorf("second run: want the miner's merge with its reason; stdout:\n%s", out2)
	}
	if !strings.Contains(out2, "miner: marked followed: ") && !strings.Contains(out2, "miner: marked helpful: ") {
		t.Errorf("second run: want the feedback marks on the retrieved guideline; stdout:\n%s", out2)
	}
}
