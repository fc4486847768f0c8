package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// TestSetupLetsABinaryAnywhereFindItsModels installs the memory models for a fresh user with
// `skein setup` (copying from the checkout's .tools), then runs the binary from a folder outside
// any checkout with no SKEIN_TOOLS_DIR: memoryd starts from the user's install. Without it, the
// same run says in one line that memory is off and how to fix it.
func TestSetupLetsABinaryAnywhereFindItsModels(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	tools := os.Getenv("SKEIN_TOOLS_DIR")
	if tools == "" {
		tools = filepath.Join(devtest.RepoRoot(t), ".tools")
	}
	if _, err := os.Stat(filepath.Join(tools, "memory", "minilm", "model.onnx")); err != nil {
		if devenv.Required() {
			t.Fatalf("memory models not installed under %s (make setup)", tools)
		}
		t.Skip("memory models not installed (make setup)")
	}
	binaries(t) // built before the CLI's own timeouts start
	cache := t.TempDir()
	// A user's shell outside any checkout: no repo root, no tools dir, its own cache folder.
	var base []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "SKEIN_NATS_URL", "SKEIN_HOME", "SKEIN_LOG", "SKEIN_TOOLS_DIR", "SKEIN_REPO_ROOT", "XDG_CACHE_HOME",
			"SKEIN_ORT_LIB", "SKEIN_MINILM_DIR":
			continue
		}
		base = append(base, kv)
	}
	user := append(base, "XDG_CACHE_HOME="+cache)
	parent := reachableTempDir(t) // the scaffolded tool runs as nobody when the tests run as root
	if r := skein(t, parent, append(user, "SKEIN_HOME="+t.TempDir()), "", "init", "proj"); r.code != 0 {
		t.Fatalf("skein init: %s", r)
	}
	dir := filepath.Join(parent, "proj")

	before := skein(t, dir, append(user, "SKEIN_HOME="+t.TempDir()), "", "run", "--config", "agent.offline.yaml", "Greet Ada")
	if !strings.Contains(before.stderr, "memory is off") || !strings.Contains(before.stderr, "skein setup") {
		t.Fatalf("a run without models does not say memory is off and how to fix it:\n%s", before)
	}

	r := skein(t, dir, append(user, "SKEIN_TOOLS_DIR="+tools), "", "setup")
	if r.code != 0 || !strings.Contains(r.stdout, filepath.Join(cache, "skein", "memory")) {
		t.Fatalf("skein setup: %s", r)
	}
	if again := skein(t, dir, append(user, "SKEIN_TOOLS_DIR="+tools), "", "setup"); again.code != 0 || !strings.Contains(again.stdout, "already installed") {
		t.Fatalf("second skein setup: %s", again)
	}

	after := skein(t, dir, append(user, "SKEIN_HOME="+t.TempDir()), "", "run", "--config", "agent.offline.yaml", "Greet Ada")
	if strings.Contains(after.stderr, "memory is off") {
		t.Fatalf("after skein setup memory is still off:\n%s", after)
	}
	if after.code != 0 {
		t.Fatalf("run after setup: %s", after)
	}
}
