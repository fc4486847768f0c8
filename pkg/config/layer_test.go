package config_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// The configuration schema sits below what it configures: it imports neither the tool runtime
// (pkg/tools: manifests, the subprocess runner and its sandbox) nor the bus, only the leaves
// that check an input schema (pkg/tools/schema), a uid range (pkg/tools/uidrange) and a call's
// limits (pkg/tools/limits).
func TestConfigImportsNoRuntime(t *testing.T) {
	devtest.NeedProgram(t, "go")
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "github.com/skein-mesh/skein/pkg/tools", "github.com/skein-mesh/skein/pkg/bus":
			t.Errorf("pkg/config imports %s (see: go list -deps ./config)", p)
		}
	}
}
