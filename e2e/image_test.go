package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

var imageStage = flag.Bool("image", false, "run TestImageBuildStage (make image-check): build the image's stage from a copy of the build context, then run every role from it")

// maxContextBytes bounds the image's build context: the sources are about 3.5 MB; a set-up
// checkout's .tools alone is about 1 GB.
const maxContextBytes = 64 << 20

// The image builds from its build context alone, and what it holds runs. Without a container
// engine (CI has none) the Dockerfile's build stage runs as the script it is
// (deploy/docker/build-stage.sh) on a copy of what `docker build` would send, .dockerignore
// applied; then every role runs from the staged files as its own process, as in one container
// each (only SKEIN_TOOLS_DIR says where /opt/skein is), against a NATS server with the permission
// matrix, each with its own credentials file and --health listener; a task goes through all of
// them and calls each example tool.
func TestImageBuildStage(t *testing.T) {
	if !*imageStage {
		t.Skip("builds the image's stage from scratch (minutes); run with -image (make image-check)")
	}
	root := devtest.RepoRoot(t)
	ctxDir := buildContext(t, root)
	dest := filepath.Join(reachableTempDir(t), "image")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(ctxDir, "deploy", "docker", "build-stage.sh"), dest)
	cmd.Dir = ctxDir
	cmd.Env = envWithout(os.Environ(), "SKEIN_")
	started := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build stage: %v\n%s", err, out)
	}
	t.Logf("build stage: %s", time.Since(started).Round(time.Second))

	binDir, opt := filepath.Join(dest, "usr", "local", "bin"), filepath.Join(dest, "opt", "skein")
	for _, f := range []string{"usr/local/bin/skein", "usr/local/bin/skein-tool-sandbox", "opt/skein/tools/sum/sum",
		"opt/skein/tools/sum.json", "opt/skein/tools/echo.py", "opt/skein/tools/wordcount.js",
		"opt/skein/memory/lib/libonnxruntime.so", "opt/skein/memory/minilm/model.onnx", "opt/skein/memory/minilm/tokenizer.json"} {
		if st, err := os.Stat(filepath.Join(dest, f)); err != nil || st.Size() == 0 {
			t.Errorf("the stage has no %s (%v)", f, err)
		}
	}
	for _, f := range []string{"opt/skein/tools/sum/main.go", "opt/skein/venv"} {
		if _, err := os.Stat(filepath.Join(dest, f)); err == nil {
			t.Errorf("the stage holds %s, which the image does not need", f)
		}
	}
	t.Logf("staged: %.1f MB", float64(treeSize(t, dest))/(1<<20))
	if t.Failed() {
		t.FailNow()
	}

	// The NATS server a deployment would run, with the matrix and one file per identity.
	creds := filepath.Join(t.TempDir(), "creds")
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", CredsDir: creds, Names: protocol.NewNames("")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.URL()

	work := reachableTempDir(t)
	writeFiles(t, work, map[string]string{"agent.yaml": fmt.Sprintf(`agent: {name: imaged, max_steps: 8}
llm: {provider: scripted, model: scripted, script: script.yaml}
tools: {manifest_dirs: [%q], enabled: [sum, echo, wordcount]}
`, filepath.Join(opt, "tools")),
		// Each rule moves on only when the previous tool's real output is in its result.
		"script.yaml": `rules:
  - when: {system: "^skein-miner"}
    reply: {text: "Add numbers with the sum tool."}
  - when: {last: "beta"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: "3.75 FROM-THE-IMAGE beta"}}]}
  - when: {last: "FROM-THE-IMAGE"}
    reply: {tool_calls: [{name: wordcount, args: {text: "alpha beta beta"}}]}
  - when: {last: "3\\.75"}
    reply: {tool_calls: [{name: echo, args: {text: "from-the-image", upper: true}}]}
  - when: {last: "^Add "}
    reply: {tool_calls: [{name: sum, args: {numbers: [1.5, 2.25]}}]}
`})
	// What the image's ENV sets, with /opt/skein where the stage put it; no go.work above the
	// working folder, so nothing is found in a checkout.
	env := append(envWithout(os.Environ(), "SKEIN_"), "SKEIN_TOOLS_DIR="+opt, "SKEIN_HOME="+filepath.Join(work, "home"),
		"SKEIN_CREDS_DIR="+creds)
	health, procs := map[string]string{}, map[string]*proc{}
	for _, role := range []string{"gateway", "planner", "executor", "toolhost", "memoryd", "miner"} {
		health[role] = freePort(t)
		procs[role] = startIn(t, work, env, role, filepath.Join(binDir, role), "--nats", url, "--config", "agent.yaml", "--health", health[role])
	}
	for role, addr := range health {
		poll.Eventually(t, 5*time.Minute, role+" ready", func() error {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%d %s", resp.StatusCode, body)
			}
			return nil
		})
	}

	run := exec.CommandContext(ctx, filepath.Join(binDir, "skein"), "run", "--nats", url, "--config", "agent.yaml", "--json",
		"Add 1.5 and 2.25, shout a word and count some.")
	run.Dir, run.Env = work, env
	var stdout, stderr strings.Builder
	run.Stdout, run.Stderr = &stdout, &stderr
	err = run.Run()
	res := parseRunJSON(t, cliResult{stdout: stdout.String(), stderr: stderr.String()})
	if err != nil || res.Outcome != "success" || res.FinalText != "3.75 FROM-THE-IMAGE beta" {
		t.Fatalf("skein run from the stage: %v, %+v\n%s", err, res, stderr.String())
	}
	// Peak memory of each role, for the requests and limits of deploy/k8s.
	for role, p := range procs {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				t.Logf("%s peak RSS: %s", role, strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")))
			}
		}
	}
}

// buildContext copies what `docker build .` would send from root (.dockerignore applied) to a
// new folder, after checking that .dockerignore leaves out everything git ignores, the secrets
// and tools a set-up checkout holds, and nothing the build needs.
func buildContext(t *testing.T, root string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	ignored := func(rel string) bool {
		m, err := pm.MatchesOrParentMatches(rel)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, p := range []string{".git/config", ".tools/venv/bin/python", ".tools/memory/minilm/model.onnx", "bin/skein",
		"deploy/creds/admin.nk", "deploy/creds/http.env", ".skein/creds/admin.nk", "demo/.skein/creds/client.nk", ".image-stage/usr/local/bin/skein"} {
		if !ignored(p) {
			t.Errorf(".dockerignore sends %s", p)
		}
	}
	for _, p := range []string{"go.work", "Makefile", "mk/build.mk", "deploy/docker/build-stage.sh", "examples/tools/sum/main.go",
		"pkg/embed/minilm/scripts/export_onnx.py", "gateway/console/static/index.html"} {
		if ignored(p) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", p)
		}
	}
	// What git ignores in this checkout (builds, tools, homes) stays out of the context too.
	out, err := exec.Command("git", "-C", root, "ls-files", "--others", "--ignored", "--exclude-standard", "--directory").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p = strings.TrimSuffix(p, "/"); !ignored(p) {
			t.Errorf(".dockerignore sends %s, which git ignores", p)
		}
	}

	dst := reachableTempDir(t)
	var size int64
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		if ignored(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			size += info.Size()
			return copyFile(p, target, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("build context: %.1f MB", float64(size)/(1<<20))
	if size > maxContextBytes {
		t.Fatalf("the build context is %d MB, over %d MB: .dockerignore lets something big through", size>>20, maxContextBytes>>20)
	}
	if t.Failed() {
		t.FailNow()
	}
	return dst
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func treeSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}

// envWithout is env without the variables whose names start with prefix.
func envWithout(env []string, prefix string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}
