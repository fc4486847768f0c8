package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// The heavy dependencies a binary links only when it uses them (module paths without their
// major version, so an upgrade to the next one is still caught).
const (
	anthropicSDK  = "github.com/anthropics/anthropic-sdk-go"
	openaiSDK     = "github.com/openai/openai-go"
	natsServerMod = "github.com/nats-io/nats-server"
	onnxRuntime   = "github.com/yalue/onnxruntime_go"
	milvusSDK     = "github.com/milvus-io/milvus-sdk-go"
)

// binaryDeps says, for each binary `make build` builds, which of those it must not link: the
// provider SDKs only where a model is called (executor, planner, miner, and memoryd's judge),
// nats-server only where a server is embedded (the CLI), ONNX Runtime and Milvus only where
// memory is embedded and stored (memoryd and the CLI's embedded mesh). The CLI links all of
// them, which shows the check sees what a binary links.
var binaryDeps = []struct {
	name, module, pkg string
	env               []string
	forbidden, needed []string
}{
	{name: "gateway", forbidden: []string{anthropicSDK, openaiSDK, natsServerMod, onnxRuntime, milvusSDK}},
	{name: "toolhost", forbidden: []string{anthropicSDK, openaiSDK, natsServerMod, onnxRuntime, milvusSDK}},
	{name: "planner", forbidden: []string{natsServerMod, onnxRuntime, milvusSDK}, needed: []string{anthropicSDK, openaiSDK}},
	{name: "executor", forbidden: []string{natsServerMod, onnxRuntime, milvusSDK}, needed: []string{anthropicSDK, openaiSDK}},
	{name: "miner", forbidden: []string{natsServerMod, onnxRuntime, milvusSDK}, needed: []string{anthropicSDK, openaiSDK}},
	{name: "memoryd", forbidden: []string{natsServerMod}, needed: []string{onnxRuntime, milvusSDK}},
	{name: "skein", module: "cli", pkg: "./cmd/skein", needed: []string{anthropicSDK, openaiSDK, natsServerMod, onnxRuntime, milvusSDK}},
	{name: "skein-tool-sandbox", module: "pkg", pkg: "./tools/cmd/skein-tool-sandbox", env: []string{"CGO_ENABLED=0"}, // as mk/build.mk builds it
		forbidden: []string{anthropicSDK, openaiSDK, natsServerMod, onnxRuntime, milvusSDK}},
}

// TestBinariesLinkOnlyWhatTheyUse lists the modules each binary's packages come from (go list
// -deps, as `make build` builds them) and fails when a binary links a dependency it does not use.
func TestBinariesLinkOnlyWhatTheyUse(t *testing.T) {
	devtest.NeedProgram(t, "go")
	root := devtest.RepoRoot(t)
	for _, b := range binaryDeps {
		t.Run(b.name, func(t *testing.T) {
			module, pkg := b.module, b.pkg
			if module == "" { // a role: <role>/cmd/<role>
				module, pkg = b.name, "./cmd/"+b.name
			}
			cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", pkg)
			cmd.Dir = filepath.Join(root, module)
			cmd.Env = append(os.Environ(), b.env...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps %s in %s: %v %s", pkg, module, err, stderrOf(err))
			}
			mods := strings.Fields(string(out))
			// linked returns the module of dep the binary links ("" if none).
			linked := func(dep string) string {
				i := slices.IndexFunc(mods, func(m string) bool { return m == dep || strings.HasPrefix(m, dep+"/") })
				if i < 0 {
					return ""
				}
				return mods[i]
			}
			for _, dep := range b.forbidden {
				if m := linked(dep); m != "" {
					t.Errorf("%s links %s, which it does not use (the imports that pull it in: cd %s && GOWORK=off go mod why -vendor -m %s)", b.name, m, module, m)
				}
			}
			for _, dep := range b.needed {
				if linked(dep) == "" {
					t.Errorf("%s does not link %s: the check no longer sees what the binary links, or this table is out of date", b.name, dep)
				}
			}
		})
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// TestServiceModulesRequireOnlyPkg: each role's module, its tests included, depends on the shared
// library alone, and the library on no module of this repository; what runs several roles
// together is the CLI's (cli/) or a test's (e2e/). make tidy-check keeps go.mod honest about
// what the code imports.
func TestServiceModulesRequireOnlyPkg(t *testing.T) {
	const repo = "github.com/skein-mesh/skein/"
	root := devtest.RepoRoot(t)
	for _, m := range []string{"pkg", "gateway", "planner", "executor", "toolhost", "memoryd", "miner"} {
		cmd := exec.Command("go", "mod", "edit", "-json")
		cmd.Dir = filepath.Join(root, m)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go mod edit -json in %s: %v %s", m, err, stderrOf(err))
		}
		var mod struct{ Require []struct{ Path string } }
		if err := json.Unmarshal(out, &mod); err != nil {
			t.Fatalf("%s/go.mod: %v", m, err)
		}
		for _, r := range mod.Require {
			if strings.HasPrefix(r.Path, repo) && (m == "pkg" || r.Path != repo+"pkg") {
				t.Errorf("%s/go.mod requires %s: a role's module depends on pkg only (move a test that runs several roles to e2e/inproc)", m, r.Path)
			}
		}
	}
}
