package minilm_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
)

// `skein setup` installs the very packages `make setup` does.
func TestInstallPinsMatchTheMakefile(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(devtest.RepoRoot(t), "mk", "memory.mk"))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(string(mk), "\n") {
		if k, v, ok := strings.Cut(l, ":="); ok {
			lines[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if got, want := lines["MEM_NODEPS"], strings.Join(minilm.InstallNoDeps, " "); got != want {
		t.Errorf("mk/memory.mk MEM_NODEPS %q, skein setup installs %q", got, want)
	}
	if got, want := lines["MEM_TOOLS"], strings.Join(minilm.InstallTools, " "); !strings.HasPrefix(got, want) {
		t.Errorf("mk/memory.mk MEM_TOOLS %q, skein setup installs %q", got, want)
	}
}
