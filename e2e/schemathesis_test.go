package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// schemathesisExamples is how many generated examples each operation gets (schemathesis's
// --max-examples) unless SKEIN_SCHEMATHESIS_EXAMPLES says otherwise; docs/benchmarks.md has
// what a run costs.
const schemathesisExamples = 3

// TestHTTPAPIMatchesItsOpenAPIDocument runs schemathesis (mk/schemathesis.mk) against
// `skein up --http`, every role running: each operation of docs/openapi.json, its coverage cases
// (the boundaries of each constraint and each way to break it, undeclared methods, missing
// auth), a bounded number of generated examples per operation and the stateful sequences the
// document's ids link, with every check, a fixed seed and e2e/testdata/schemathesis.toml. A 5xx,
// an answer the document does not describe, a schema-valid request refused or a schema-invalid
// one accepted fails the test, with schemathesis's report and a command to replay each case.
func TestHTTPAPIMatchesItsOpenAPIDocument(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a mesh and schemathesis")
	}
	st := filepath.Join(devenv.ToolsDir(), "venv", "bin", "schemathesis")
	if _, err := os.Stat(st); err != nil {
		devtest.Missing(t, "schemathesis (mk/schemathesis.mk)")
	}
	examples := schemathesisExamples
	if v := os.Getenv("SKEIN_SCHEMATHESIS_EXAMPLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SKEIN_SCHEMATHESIS_EXAMPLES=%q: want a whole number of 1 or more", v)
		}
		examples = n
	}
	root := devtest.RepoRoot(t)
	httpAddr := freePort(t)
	m := startUp(t, writeProject(t, soakAgent, soakScript), "--http", httpAddr)
	bustest.WaitAgent(t, m.c, meshNames, "assistant")
	waitMemoryd(t, m.c)
	token, err := os.ReadFile(filepath.Join(m.home, "http.token"))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, st, "--config-file", filepath.Join(root, "e2e", "testdata", "schemathesis.toml"), "--no-color",
		"run", filepath.Join(root, "docs", "openapi.json"), "--url", "http://"+httpAddr,
		"--header", "Authorization: Bearer "+strings.TrimSpace(string(token)),
		"--checks", "all", "--seed", "1", "--max-examples", strconv.Itoa(examples), "--workers", "1",
		"--generation-database", "none")
	cmd.Dir = t.TempDir() // whatever it writes stays out of the tree
	start := time.Now()
	out, err := cmd.CombinedOutput()
	report := string(out)
	cases := regexp.MustCompile(`(\d+) generated`).FindStringSubmatch(report)
	wall := time.Since(start)
	if ps := cmd.ProcessState; ps != nil {
		t.Logf("schemathesis, %d examples per operation: %s cases; %s; %s wall, %s CPU", examples, append(cases, "", "?")[1], strings.Trim(lastLine(report), "= "),
			wall.Round(time.Second), (ps.UserTime() + ps.SystemTime()).Round(time.Second/10))
	}
	if err != nil {
		if i := strings.Index(report, "FAILURES"); i >= 0 {
			report = report[i:]
		}
		t.Fatalf("schemathesis: the HTTP API and docs/openapi.json disagree (%v):\n%s", err, report)
	}
	n := 0
	if cases != nil {
		n, _ = strconv.Atoi(cases[1])
	}
	if n < 200 {
		t.Fatalf("schemathesis generated %d cases; the document is not being read:\n%s", n, report)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}
