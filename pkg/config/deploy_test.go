package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// The deploy/ manifests say and do the same: every file compose mounts is shipped (or is a
// credential `skein creds` writes, which is never shipped), the agent configs they give the roles
// load with this package's own checks, both run streams and buckets with the 3 replicas the
// 3-node cluster is for, compose publishes ports on the host's loopback only, and every gateway
// takes the one HTTP token the operator made rather than generating its own.
func TestDeployManifestsAreConsistent(t *testing.T) {
	root := devtest.RepoRoot(t)
	dir := filepath.Join(root, "deploy")

	var compose struct {
		XSkein struct {
			Volumes     []string          `yaml:"volumes"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"x-skein"`
		Services map[string]struct {
			Volumes     []string          `yaml:"volumes"`
			Command     any               `yaml:"command"` // a list or a shell string
			EnvFile     []string          `yaml:"env_file"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	readYAML(t, filepath.Join(dir, "compose.yaml"), &compose)
	mounts := append([]string(nil), compose.XSkein.Volumes...)
	for _, s := range compose.Services {
		mounts = append(mounts, s.Volumes...)
	}

	// Secrets come from deploy/creds, which `skein creds --dir deploy/creds` fills and git ignores.
	ignore, err := os.ReadFile(filepath.Join(root, ".gitignore"))
	if err != nil || !slices.Contains(strings.Split(string(ignore), "\n"), "/deploy/creds/") {
		t.Errorf(".gitignore does not keep deploy/creds/ (the operator's secrets) out of the repository (%v)", err)
	}
	for name, s := range compose.Services {
		for _, f := range s.EnvFile {
			if strings.HasPrefix(f, "./creds/") {
				if f != "./creds/nkeys.env" && f != "./creds/http.env" {
					t.Errorf("compose service %s reads %s, which `skein creds` does not write", name, f)
				}
			} else if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("compose service %s reads %s, which deploy/ does not ship: %v", name, f, err)
			}
		}
		for _, p := range s.Ports {
			if host, _, _ := strings.Cut(p, ":"); host != "127.0.0.1" {
				t.Errorf("compose service %s publishes %q on every interface of the host; publish it on 127.0.0.1", name, p)
			}
		}
		if commandHas(s.Command, "--http") {
			if !slices.Contains(s.EnvFile, "./creds/http.env") {
				t.Errorf("compose service %s serves the HTTP API without the operator's token (env_file ./creds/http.env): each container would make its own", name)
			}
			if _, set := s.Environment["SKEIN_HTTP_TOKEN"]; set {
				t.Errorf("compose service %s sets SKEIN_HTTP_TOKEN in the shipped file", name)
			}
		}
	}
	if _, set := compose.XSkein.Environment["SKEIN_HTTP_TOKEN"]; set {
		t.Error("compose sets SKEIN_HTTP_TOKEN in the shipped file")
	}
	if len(compose.Services["gateway"].Ports) == 0 {
		t.Error("compose publishes no port of the gateway's HTTP API")
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
		case "Secret":
			t.Errorf("k8s/skein.yaml ships Secret %s: secrets are made by the operator (`skein creds`, kubectl create secret)", doc.Metadata.Name)
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
	servers := 0
	for _, d := range deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if !slices.Contains(c.Command, "--http") {
				continue
			}
			servers++
			token := false
			for _, e := range c.Env {
				if e.Name != "SKEIN_HTTP_TOKEN" {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				token = e.Value == "" && ref.Name != "" && ref.Key != ""
				if !token {
					t.Errorf("Deployment %s: SKEIN_HTTP_TOKEN must come from a Secret (valueFrom.secretKeyRef), not %+v", d.Metadata.Name, e)
				}
			}
			if !token {
				t.Errorf("Deployment %s serves the HTTP API without SKEIN_HTTP_TOKEN from a Secret: each of its %d replicas would make its own token", d.Metadata.Name, d.Spec.Replicas)
			}
		}
	}
	if servers == 0 {
		t.Error("k8s/skein.yaml serves no HTTP API (no container runs with --http)")
	}
	checkK8sRoles(t, filepath.Join(dir, "k8s", "skein.yaml"), deployments)
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

// commandHas reports whether a compose command (a list, or a string split on spaces) has word.
func commandHas(cmd any, word string) bool {
	switch c := cmd.(type) {
	case string:
		return slices.Contains(strings.Fields(c), word)
	case []any:
		for _, w := range c {
			if w == word {
				return true
			}
		}
	}
	return false
}

type k8sDeployment struct {
	Metadata struct{ Name string } `yaml:"metadata"`
	Spec     struct {
		Replicas int `yaml:"replicas"`
		Template struct {
			Spec struct {
				Containers []struct {
					Command []string `yaml:"command"`
					Ports   []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					ReadinessProbe k8sProbe `yaml:"readinessProbe"`
					LivenessProbe  k8sProbe `yaml:"livenessProbe"`
					Resources      struct {
						Requests map[string]string `yaml:"requests"`
						Limits   map[string]string `yaml:"limits"`
					} `yaml:"resources"`
					EnvFrom []struct {
						SecretRef struct{ Name string } `yaml:"secretRef"`
					} `yaml:"envFrom"`
					Env []struct {
						Name      string `yaml:"name"`
						Value     string `yaml:"value"`
						ValueFrom struct {
							SecretKeyRef struct {
								Name string `yaml:"name"`
								Key  string `yaml:"key"`
							} `yaml:"secretKeyRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
				} `yaml:"containers"`
				Volumes []struct {
					ConfigMap struct{ Name string } `yaml:"configMap"`
					Secret    struct {
						SecretName string `yaml:"secretName"`
						Items      []struct {
							Key string `yaml:"key"`
						} `yaml:"items"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"` // a number or a port's name
	} `yaml:"httpGet"`
}

// checkK8sRoles: every role runs with its health listener, probed on it (readiness on /readyz,
// liveness on /livez), with CPU and memory requested and limited; it mounts only its own
// credentials file; and the manifest's comments show how each Secret it uses is made, the
// credentials Secret from the roles' files alone (never the folder, which holds admin.nk).
func checkK8sRoles(t *testing.T, path string, deployments []k8sDeployment) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var comments strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(line), "#"); ok {
			comments.WriteString(strings.TrimSuffix(strings.TrimSpace(c), "\\") + " ")
		}
	}
	made := map[string][]string{} // Secret → its kubectl create secret arguments
	for _, cmd := range strings.Split(comments.String(), "kubectl create secret generic ")[1:] {
		words := strings.Fields(cmd)
		var args []string
		for _, w := range words[1:] {
			if !strings.HasPrefix(w, "--") {
				break
			}
			args = append(args, w)
		}
		made[words[0]] = args
	}
	secretShown := func(d, name string) {
		if _, ok := made[name]; !ok {
			t.Errorf("Deployment %s uses Secret %s, which the manifest's comments never say how to make (kubectl create secret generic %s ...)", d, name, name)
		}
	}
	roleFiles := map[string]bool{}
	for _, d := range deployments {
		name := d.Metadata.Name
		role := strings.TrimPrefix(name, "skein-")
		spec := d.Spec.Template.Spec
		for _, c := range spec.Containers {
			port := ""
			if i := slices.Index(c.Command, "--health"); i >= 0 && i+1 < len(c.Command) {
				_, port, _ = strings.Cut(c.Command[i+1], ":")
			} else {
				t.Errorf("Deployment %s: no --health ADDR in %v: its probes would have nothing to ask", name, c.Command)
			}
			for probe, want := range map[*k8sProbe]string{&c.ReadinessProbe: "/readyz", &c.LivenessProbe: "/livez"} {
				if probe.HTTPGet.Path != want {
					t.Errorf("Deployment %s: a probe asks %q, want %s", name, probe.HTTPGet.Path, want)
				}
				got := fmt.Sprint(probe.HTTPGet.Port)
				for _, p := range c.Ports {
					if p.Name == got {
						got = fmt.Sprint(p.ContainerPort)
					}
				}
				if got != port {
					t.Errorf("Deployment %s: the %s probe asks port %v, but --health listens on %s", name, want, probe.HTTPGet.Port, port)
				}
			}
			for _, res := range []string{"cpu", "memory"} {
				if c.Resources.Requests[res] == "" || c.Resources.Limits[res] == "" {
					t.Errorf("Deployment %s: %s request or limit missing (%+v)", name, res, c.Resources)
				}
			}
			for _, e := range c.EnvFrom {
				if e.SecretRef.Name != "" {
					secretShown(name, e.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				if ref := e.ValueFrom.SecretKeyRef.Name; ref != "" {
					secretShown(name, ref)
				}
			}
		}
		for _, v := range spec.Volumes {
			if v.Secret.SecretName == "" {
				continue
			}
			secretShown(name, v.Secret.SecretName)
			if len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != role+".nk" {
				t.Errorf("Deployment %s mounts %+v of Secret %s; want only %s.nk", name, v.Secret.Items, v.Secret.SecretName, role)
			}
			roleFiles["--from-file=creds/"+role+".nk"] = true
		}
	}
	for _, arg := range made["skein-creds"] {
		if !roleFiles[arg] {
			t.Errorf("the skein-creds Secret is made with %s, which no role mounts (the admin's or client's file, or the whole folder?)", arg)
		}
		delete(roleFiles, arg)
	}
	for arg := range roleFiles {
		t.Errorf("the skein-creds Secret is not made with %s, which a role mounts", arg)
	}
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
	stage, err := os.ReadFile(filepath.Join(root, "deploy", "docker", "build-stage.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docker), "COPY --from=build /stage/ /") || !strings.Contains(string(stage), `cp -R examples/tools "$dest`+imageTools+`"`) {
		t.Fatalf("the image no longer holds examples/tools at %s (Dockerfile, build-stage.sh); update this test", imageTools)
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
