package poll_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// A test that sleeps to wait hopes the thing it waits for is done by then: on a loaded machine
// it is not (a flaky test), on an idle one the test waits for nothing (a slow one). So tests wait
// with this package, and a fixed duration in a test must say why the duration itself is the
// point, in a comment on its line or the lines just above, starting with one of these reasons:
var sleepReasons = []string{
	"fault injection:",           // a fake that must be late, a process killed mid-call
	"pacing:",                    // a load generator's arrival schedule
	"the duration is the point:", // a lease, TTL or timeout that must pass
}

// What a blind wait looks like: a sleep, a ticker, or a deadline loop written by hand.
var blindWait = regexp.MustCompile(`time\.Sleep\(|time\.NewTicker\(|time\.Tick\(|time\.Now\(\)\.Before\(|time\.Until\(`)

func TestNoTestWaitsBlindly(t *testing.T) {
	root := devtest.RepoRoot(t)
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".tools", "node_modules", ".git", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !isTestCode(path) || filepath.Base(path) == "nosleep_test.go" { // its examples are meant to be found
			return nil
		}
		found, err := blindWaits(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, line := range found {
			bad = append(bad, rel+":"+line)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("%d waits in tests neither poll (pkg/poll) nor say why a fixed time is the point (a comment starting %q):\n%s",
			len(bad), sleepReasons, strings.Join(bad, "\n"))
	}
}

// isTestCode: a _test.go file, or a file of a package that exists for tests (bustest, llmtest, ...).
func isTestCode(path string) bool {
	if !strings.HasSuffix(path, ".go") {
		return false
	}
	return strings.HasSuffix(path, "_test.go") || strings.HasSuffix(filepath.Base(filepath.Dir(path)), "test")
}

// blindWaits returns "line: text" for each blind wait in the file that no reason comment covers:
// one on the same line or in the comment block right above it.
func blindWaits(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var found []string
	var above []string // the comment lines right above the current line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "//") {
			above = append(above, line)
			continue
		}
		if blindWait.MatchString(line) && !hasReason(append(above, line)) {
			found = append(found, strconv.Itoa(n)+": "+line)
		}
		above = above[:0]
	}
	return found, sc.Err()
}

func hasReason(lines []string) bool {
	for _, l := range lines {
		for _, r := range sleepReasons {
			if strings.Contains(l, "// "+r) {
				return true
			}
		}
	}
	return false
}

// The scan finds a bare sleep and a hand-written deadline loop, and passes one whose reason is
// said above it or on its line.
func TestBlindWaitsAreFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x_test.go")
	src := `package x
func f() {
	time.Sleep(time.Second)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
	}
	// fault injection: the fake answers after the caller's timeout
	time.Sleep(time.Second)
	time.Sleep(time.Second) // pacing: one arrival a second
	// A comment without a reason.
	time.Sleep(time.Second)
}
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	found, err := blindWaits(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range found {
		lines = append(lines, strings.SplitN(f, ":", 2)[0])
	}
	if got := strings.Join(lines, ","); got != "3,4,10" {
		t.Fatalf("blind waits on lines %s, want 3,4,10 (found %q)", got, found)
	}
}
