package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// The documentation's examples are run as a reader would run them, against a real mesh. The
// convention the pages follow (README.md, "Examples in these pages"):
//
//   - Every fenced block says what it is. `sh`, `bash`, `shell` and `console` (its `$ ` lines)
//     blocks run with bash -e -o pipefail, `python` blocks with the Python client's interpreter;
//     json, yaml, text and the other languages are not run. A fence without a language fails
//     the test: say `text` for output or a synopsis.
//   - `<!-- example: skip: WHY -->` on the last non-blank line before a fence leaves that block
//     out (a real model key, a container engine, several machines, minutes of benchmark);
//     `<!-- examples: skip: WHY -->` anywhere in a page leaves out every block of the page. The
//     test counts and reports them with their reasons. `<!-- example: fresh -->` runs a block as a
//     new user's first command: neither SKEIN_HOME nor SKEIN_NATS_URL set, so `skein run`
//     starts a mesh of its own.
//   - Every block runs in a folder of its own holding the scaffold of `skein init` (agent.yaml,
//     agent.offline.yaml, tools/), links to the checkout's examples/, docs/, e2e/, clients/ and
//     .tools/, and bin/ with the built binaries, which also lead PATH (then .tools/bin with the
//     `nats` CLI, then .tools/venv/bin with `python`).
//   - A mesh runs throughout: `skein up --http --config agent.offline.yaml` (agent greeter,
//     offline). Blocks run in a shell that exported what it printed: SKEIN_HOME is its home (its
//     credentials in $SKEIN_HOME/creds, its HTTP token in $SKEIN_HOME/http.token) and
//     SKEIN_NATS_URL its URL.
//   - Placeholders are the documented defaults, replaced by the running mesh's: the addresses
//     127.0.0.1:4222 (NATS) and 127.0.0.1:8080 (HTTP), and the word SESSION_ID, replaced by the
//     id of a finished session of that mesh.
//
// An unmarked block that exits non-zero, does not finish in exampleTimeout, or prints a NATS
// permissions or authorization violation (the nats CLI reports a refused reply inbox or
// subject and still exits 0) fails the test with its file and line.

const exampleTimeout = 90 * time.Second

// docPages are the pages whose examples run: the README, every page of docs/ and the Python
// client's README.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pages)
	return append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "clients", "python", "README.md")}, pages...)
}

// example is one fenced block of a page.
type example struct {
	file  string // relative to the checkout
	line  int    // of the opening fence
	lang  string
	body  string
	skip  string // why it is left out; "" runs it
	fresh bool   // run without the mesh's SKEIN_HOME
}

func (e example) where() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

// runnable says whether a block's language is one the test runs.
func runnable(lang string) bool {
	switch lang {
	case "sh", "bash", "shell", "console", "python":
		return true
	}
	return false
}

var (
	fenceRe    = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([^\\s`]*)")
	markerRe   = regexp.MustCompile(`^\s*<!--\s*example:\s*(.*?)\s*-->\s*$`)
	refusedRe  = regexp.MustCompile(`(?i)(permissions|authorization) violation`)
	pageSkipRe = regexp.MustCompile(`(?m)^\s*<!--\s*examples:\s*skip:\s*(.*?)\s*-->\s*$`)
)

// closes says whether line closes a block opened by the fence open (as long or longer, nothing else).
func closes(open, line string) bool {
	l := strings.TrimSpace(line)
	return strings.HasPrefix(l, open) && strings.Trim(l, open[:1]) == ""
}

// extract returns a page's fenced blocks with their markers, and the mistakes in how the page
// marks them (a fence without a language, a marker not followed by a fence, an unknown marker).
func extract(rel string, text []byte) ([]example, []string) {
	var (
		out      []example
		problems []string
		pageSkip string
	)
	if m := pageSkipRe.FindSubmatch(text); m != nil {
		pageSkip = string(m[1])
	}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var (
		n          int
		marker     string // the pending marker's text
		markerLine int
		cur        *example
		open       string
		body       strings.Builder
	)
	for sc.Scan() {
		n++
		line := sc.Text()
		if cur != nil {
			if closes(open, line) {
				cur.body = body.String()
				out = append(out, *cur)
				cur = nil
				continue
			}
			body.WriteString(line + "\n")
			continue
		}
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			e := example{file: rel, line: n, lang: strings.ToLower(m[2]), skip: pageSkip}
			if e.lang == "" {
				problems = append(problems, fmt.Sprintf("%s:%d: a fence without a language: say what it is (sh, python, json, yaml, text, ...)", rel, n))
			}
			if marker != "" {
				if why, ok := strings.CutPrefix(marker, "skip:"); ok {
					e.skip = strings.TrimSpace(why)
				} else {
					e.fresh = true
				}
				if !runnable(e.lang) {
					problems = append(problems, fmt.Sprintf("%s:%d: an example marker on a %q block, which never runs", rel, markerLine, e.lang))
				}
				marker = ""
			}
			open, cur = m[1], &e
			body.Reset()
			continue
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if marker != "" {
			problems = append(problems, fmt.Sprintf("%s:%d: example marker not followed by a fence", rel, markerLine))
			marker = ""
		}
		if m := markerRe.FindStringSubmatch(line); m != nil {
			switch why, skip := strings.CutPrefix(m[1], "skip:"); {
			case skip && strings.TrimSpace(why) == "":
				problems = append(problems, fmt.Sprintf("%s:%d: a skip marker must say why", rel, n))
			case !skip && m[1] != "fresh":
				problems = append(problems, fmt.Sprintf("%s:%d: unknown example marker %q (skip: WHY, fresh)", rel, n, m[1]))
			default:
				marker, markerLine = m[1], n
			}
		}
	}
	if cur != nil {
		problems = append(problems, fmt.Sprintf("%s:%d: fence never closed", rel, cur.line))
	}
	if marker != "" {
		problems = append(problems, fmt.Sprintf("%s:%d: example marker not followed by a fence", rel, markerLine))
	}
	return out, problems
}

// script is what runs for a block: a console block's commands without their prompts, and the
// placeholders replaced by the mesh's values.
func script(e example, subst *strings.Replacer) string {
	body := e.body
	if e.lang == "console" {
		var cmds []string
		for _, l := range strings.Split(body, "\n") {
			if c, ok := strings.CutPrefix(l, "$ "); ok {
				cmds = append(cmds, c)
			}
		}
		body = strings.Join(cmds, "\n") + "\n"
	}
	return subst.Replace(body)
}

func TestDocsExamplesMarkers(t *testing.T) {
	page := "a\n<!-- example: skip: needs a key -->\n\n```sh\nrun\n```\n```\nout\n```\n" +
		"<!-- example: fresh -->\n```bash\nx\n```\n<!-- example: skip: -->\ntext\n```json\n{}\n```\n" +
		"<!-- example: bogus -->\n```sh\ny\n```\n"
	got, problems := extract("p.md", []byte(page))
	if len(got) != 5 {
		t.Fatalf("want 5 blocks, got %+v", got)
	}
	if got[0].skip != "needs a key" || got[0].body != "run\n" || got[0].line != 4 {
		t.Errorf("skip marker: %+v", got[0])
	}
	if !got[2].fresh || got[2].skip != "" {
		t.Errorf("fresh marker: %+v", got[2])
	}
	want := []string{
		"p.md:7: a fence without a language",
		"p.md:14: a skip marker must say why",
		"p.md:19: unknown example marker",
	}
	if len(problems) != len(want) {
		t.Fatalf("problems: want %d, got %q", len(want), problems)
	}
	for i, w := range want {
		if !strings.HasPrefix(problems[i], w) {
			t.Errorf("problem %d: want %q, got %q", i, w, problems[i])
		}
	}
	all, _ := extract("q.md", []byte("<!-- examples: skip: benchmarks, minutes each -->\n```sh\nmake soak\n```\n"))
	if len(all) != 1 || all[0].skip != "benchmarks, minutes each" {
		t.Errorf("page-wide skip: %+v", all)
	}
}

// TestDocsExamples runs every runnable block of README.md, docs/*.md and clients/python/README.md
// against a mesh of `skein up --http`, as the convention above describes.
func TestDocsExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the documentation's examples against a mesh")
	}
	root := devtest.RepoRoot(t)
	var (
		all      []example
		problems []string
	)
	for _, p := range docPages(t, root) {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		ex, pr := extract(rel, text)
		all, problems = append(all, ex...), append(problems, pr...)
	}
	for _, p := range problems {
		t.Error(p)
	}

	toolsDir := os.Getenv("SKEIN_TOOLS_DIR")
	if toolsDir == "" {
		toolsDir = filepath.Join(root, ".tools")
	}
	for _, need := range []string{"bin/nats", "venv/bin/python"} {
		if _, err := os.Stat(filepath.Join(toolsDir, need)); err != nil {
			devtest.Missing(t, filepath.Join(toolsDir, need))
		}
	}
	began := time.Now()
	binDir := binaries(t)
	t.Logf("binaries built in %.1fs", time.Since(began).Seconds())
	began = time.Now()

	// The scaffold every block finds in its folder, and the mesh serving its offline agent.
	home := filepath.Join(t.TempDir(), "home")
	env := cliEnv(t, home)
	scaffold := initProject(t, env)
	natsAddr, httpAddr := freePort(t), freePort(t)
	up := startIn(t, scaffold, env, "skein-up", "skein", "up", "--listen", natsAddr, "--http", httpAddr, "--config", "agent.offline.yaml")
	waitForLine(t, up, "skein mesh up")
	waitForLine(t, up, "gateway ready")
	r := skein(t, scaffold, env, "", "run", "--nats", "nats://"+natsAddr, "--config", "agent.offline.yaml", "--json", "Greet Ada")
	if r.code != 0 {
		t.Fatalf("a first session on the mesh: %s", r)
	}
	session := parseRunJSON(t, r).SessionID
	t.Logf("mesh up and a first session done in %.1fs", time.Since(began).Seconds())

	subst := strings.NewReplacer("127.0.0.1:4222", natsAddr, "127.0.0.1:8080", httpAddr, "SESSION_ID", session)
	userHome := t.TempDir()
	path := strings.Join([]string{binDir, filepath.Join(toolsDir, "bin"), filepath.Join(toolsDir, "venv", "bin"), os.Getenv("PATH")}, string(os.PathListSeparator))
	baseEnv := []string{"PATH=" + path, "HOME=" + userHome, "SKEIN_TOOLS_DIR=" + toolsDir, "LANG=C.UTF-8"}
	for _, k := range []string{"TMPDIR", "GOCACHE", "GOPATH", "GOMODCACHE", "CI", "SKEIN_REQUIRE_ALL"} {
		if v, ok := os.LookupEnv(k); ok {
			baseEnv = append(baseEnv, k+"="+v)
		}
	}

	var ran, skipped int
	reasons := map[string][]string{}
	for _, e := range all {
		if !runnable(e.lang) {
			continue
		}
		if e.skip != "" {
			skipped++
			reasons[e.skip] = append(reasons[e.skip], e.where())
			continue
		}
		ran++
		dir := exampleDir(t, root, scaffold, binDir, toolsDir)
		runEnv := slices.Clip(baseEnv)
		if !e.fresh {
			runEnv = append(runEnv, "SKEIN_HOME="+home, "SKEIN_NATS_URL=nats://"+natsAddr)
		}
		start := time.Now()
		out, err := runExample(dir, runEnv, e, script(e, subst), filepath.Join(toolsDir, "venv", "bin", "python"))
		if err != nil {
			t.Errorf("%s: the %s example fails as written: %v\n--- ran ---\n%s--- output ---\n%s", e.where(), e.lang, err, script(e, subst), out)
			continue
		}
		t.Logf("%s: %s example ok (%.1fs)", e.where(), e.lang, time.Since(start).Seconds())
	}
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Logf("%d examples run, %d skipped as marked:", ran, skipped)
	for _, k := range keys {
		t.Logf("  skipped (%s): %s", k, strings.Join(reasons[k], ", "))
	}
	if ran == 0 {
		t.Error("no example ran: the extraction finds nothing")
	}
}

// exampleDir is a block's own folder: a copy of the scaffold, links to the checkout and bin/.
func exampleDir(t *testing.T, root, scaffold, binDir, toolsDir string) string {
	t.Helper()
	dir := reachableTempDir(t)
	if err := os.CopyFS(dir, os.DirFS(scaffold)); err != nil {
		t.Fatal(err)
	}
	// The copy must not take the scaffold's state with it (a run's .skein).
	if err := os.RemoveAll(filepath.Join(dir, ".skein")); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"bin": binDir, ".tools": toolsDir}
	for _, d := range []string{"examples", "docs", "e2e", "clients", "pkg", "scripts"} {
		links[d] = filepath.Join(root, d)
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runExample runs one block in dir and returns what it printed.
func runExample(dir string, env []string, e example, body, python string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), exampleTimeout)
	defer cancel()
	var cmd *exec.Cmd
	if e.lang == "python" {
		cmd = exec.CommandContext(ctx, python, "-c", body)
	} else {
		cmd = exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", body)
	}
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader("")
	// Its own process group, so a timeout ends what the block started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("did not finish in %s", exampleTimeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), fmt.Errorf("exit status %d", ee.ExitCode())
	}
	if err == nil && refusedRe.Match(out) {
		return string(out), errors.New("the NATS server refused what it did")
	}
	return string(out), err
}
