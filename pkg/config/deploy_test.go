package config_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// The deploy/ manifests say and do the same: every file compose mounts is shipped (or is a
// credential `skein creds` writes), the agent
// configs they give the roles load with this package's own checks, and both run streams and
// buckets with the 3 replicas the 3-node cluster is for.
func TestDeployManifestsAreConsistent(t *testing.T) {
	dir := filepath.Join(devtest.RepoRoot(t), "deploy")

	var compose struct {
		XSkein struct {
			Volumes []string `yaml:"volumes"`
		} `yaml:"x-skein"`
		Services map[string]struct {
			Volumes []string `yaml:"volumes"`
			Command any      `yaml:"command"`
		} `yaml:"services"`
	}
	readYAML(t, filepath.Join(dir, "compose.yaml"), &compose)
	mounts := append([]string(nil), compose.XSkein.Volumes...)
	for _, s := range compose.Services {
		mounts = append(mounts, s.Volumes...)
	}
	var agentYAML string
	for _, m := range mounts {
		src, dst, _ := strings.Cut(m, ":")
		if !strings.HasPrefix(src, "./") {
			continue // a named volume
		}
		if strings.HasPrefix(src, "./creds/") {
			// Credentials are secrets the operator makes with `skein creds --dir deploy/creds`
			// (the compose file says so at its top); they are never shipped.
			if !strings.HasSuffix(src, ".nk") && !strings.HasSuffix(src, ".env") {
				t.Errorf("compose mounts %s from deploy/creds, which `skein creds` does not write", src)
			}
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
			t.Errorf("compose mounts %s, which deploy/ does not ship: %v", src, err)
		}
		if strings.HasPrefix(dst, "/etc/skein/agent.yaml") {
			agentYAML = filepath.Join(dir, src)
		}
	}
	if agentYAML == "" {
		t.Fatal("compose mounts no agent.yaml into the roles")
	}
	data, err := os.ReadFile(agentYAML)
	if err != nil {
		t.Fatal(err)
	}
	checkAgent(t, agentYAML, data)
	for _, role := range []string{"gateway", "planner", "executor", "toolhost", "memoryd", "miner"} {
		if _, ok := compose.Services[role]; !ok {
			t.Errorf("compose runs no %s", role)
		}
	}

	// Kubernetes: the ConfigMap's agent.yaml, mounted by every Deployment.
	f, err := os.Open(filepath.Join(dir, "k8s", "skein.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	configMaps := map[string]map[string]string{}
	var deployments []k8sDeployment
	for {
		var doc struct {
			Kind     string                `yaml:"kind"`
			Metadata struct{ Name string } `yaml:"metadata"`
			Data     map[string]string     `yaml:"data"`
		}
		var raw yaml.Node
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("k8s/skein.yaml: %v", err)
		}
		if err := raw.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		switch doc.Kind {
		case "ConfigMap":
			configMaps[doc.Metadata.Name] = doc.Data
		case "Deployment":
			var d k8sDeployment
			if err := raw.Decode(&d); err != nil {
				t.Fatal(err)
			}
			deployments = append(deployments, d)
		}
	}
	if len(deployments) < 6 {
		t.Errorf("k8s/skein.yaml has %d Deployments, want one per role", len(deployments))
	}
	for _, d := range deployments {
		for _, v := range d.Spec.Template.Spec.Volumes {
			cm, ok := configMaps[v.ConfigMap.Name]
			if v.ConfigMap.Name != "" && !ok {
				t.Errorf("Deployment %s mounts ConfigMap %s, which the manifest does not define", d.Metadata.Name, v.ConfigMap.Name)
			}
			if a, ok := cm["agent.yaml"]; ok {
				checkAgent(t, filepath.Join(dir, "k8s", "configmap-"+v.ConfigMap.Name+".yaml"), []byte(a))
			}
		}
	}
}

type k8sDeployment struct {
	Metadata struct{ Name string } `yaml:"metadata"`
	Spec     struct {
		Template struct {
			Spec struct {
				Volumes []struct {
					ConfigMap struct{ Name string } `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// imageTools is where the image (deploy/docker/Dockerfile) puts examples/tools.
const imageTools = "/opt/skein/tools"

func checkAgent(t *testing.T, where string, data []byte) {
	t.Helper()
	root := devtest.RepoRoot(t)
	docker, err := os.ReadFile(filepath.Join(root, "deploy", "docker", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docker), "/src/examples/tools "+imageTools) {
		t.Fatalf("the Dockerfile no longer copies examples/tools to %s; update this test", imageTools)
	}
	// The folders the image ships are checked where they come from.
	data = bytes.ReplaceAll(data, []byte(imageTools), []byte(filepath.Join(root, "examples", "tools")))
	cfg, err := config.Parse(where, data)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if cfg.Mesh.Replicas != 3 {
		t.Errorf("%s: mesh.replicas is %d; the 3-node cluster of deploy/ runs R3 streams and buckets", where, cfg.Mesh.Replicas)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
