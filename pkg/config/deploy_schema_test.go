package config_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/schema"
	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// kubernetesVersion is the Kubernetes API the k8s manifests are checked against.
const kubernetesVersion = "1.37"

// The deploy/ manifests are what their formats accept: every Kubernetes manifest validates
// against the published Kubernetes JSON schemas, strictly (an unknown or misplaced field fails),
// with kubernetes-validate (mk/deploy.mk installs it, schemas included, for offline use); the
// compose file validates against the compose-spec schema. Each check is first shown to reject a
// broken manifest, so a validator that accepts anything cannot pass.
func TestDeployManifestsMatchTheirSchemas(t *testing.T) {
	dir := filepath.Join(devtest.RepoRoot(t), "deploy")

	t.Run("compose", func(t *testing.T) {
		validate := func(path string) error {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(data, &doc); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return schema.Validate(doc)
		}
		bad := filepath.Join(t.TempDir(), "compose.yaml")
		if err := os.WriteFile(bad, []byte("services:\n  gateway:\n    image: skein\n    restart: sometimes\n    ports: [{published: 8080, targit: 8080}]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := validate(bad); err == nil {
			t.Fatal("the compose schema accepted a broken file: the check would prove nothing")
		}
		if err := validate(filepath.Join(dir, "compose.yaml")); err != nil {
			t.Errorf("deploy/compose.yaml does not match the compose-spec schema: %v", err)
		}
	})

	t.Run("kubernetes", func(t *testing.T) {
		kv := filepath.Join(devenv.ToolsDir(), "venv", "bin", "kubernetes-validate")
		if _, err := os.Stat(kv); err != nil {
			devtest.Missing(t, "kubernetes-validate (mk/deploy.mk)")
		}
		validate := func(paths ...string) (string, error) {
			out, err := exec.Command(kv, append([]string{"--strict", "--no-warn", "-k", kubernetesVersion}, paths...)...).CombinedOutput()
			return string(out), err
		}
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(bad, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: x}}\n"+
			"  template:\n    metadata: {labels: {app: x}}\n    spec:\n      containers: [{name: x, image: x, replica: 3}]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := validate(bad); err == nil || !strings.Contains(out, "replica") {
			t.Fatalf("kubernetes-validate accepted an unknown field (err %v): the check would prove nothing\n%s", err, out)
		}
		manifests, err := filepath.Glob(filepath.Join(dir, "k8s", "*.yaml"))
		if err != nil || len(manifests) == 0 {
			t.Fatalf("no manifests under deploy/k8s (%v)", err)
		}
		if out, err := validate(manifests...); err != nil {
			t.Errorf("deploy/k8s does not match the Kubernetes %s schemas: %v\n%s", kubernetesVersion, err, out)
		}
	})
}
