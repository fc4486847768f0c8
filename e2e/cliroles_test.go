package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/poll"
)

// The mesh as three machines run it, with one binary and one config: `skein server` on A (NATS,
// the permission matrix, the credentials), `skein up --roles` for the front and the memory on B
// and for the work on C, each with only its roles' credentials, and a client elsewhere with only
// client.nk. A task runs end to end across them, its lesson reaches memory on B, and a read-only
// command on A finds the running server through its home.
func TestCLIServerAndRolesOnThreeMachines(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a mesh of three processes")
	}
	base := t.TempDir()
	homes := map[string]string{}
	for _, m := range []string{"a", "b", "c", "client"} {
		homes[m] = filepath.Join(base, m)
	}
	envA := cliEnv(t, homes["a"])
	dir := initProject(t, envA)
	cfg := filepath.Join(dir, "agent.offline.yaml")
	addr := freePort(t)
	url := "nats://" + addr

	server := start(t, envA, "machine-a", "skein", "server", "--listen", addr, "--config", cfg)
	waitForLine(t, server, "skein server up")
	if b, _ := os.ReadFile(server.log); !strings.Contains(string(b), "skein up --roles executor,toolhost --nats "+url) {
		t.Errorf("skein server does not say how roles join it:\n%s", b)
	}
	copyCreds(t, homes["a"], homes["b"], "gateway", "planner", "memoryd", "miner")
	copyCreds(t, homes["a"], homes["c"], "executor", "toolhost")
	copyCreds(t, homes["a"], homes["client"], "client")

	front := start(t, cliEnv(t, homes["b"]), "machine-b", "skein", "up", "--roles", "gateway,planner,memoryd,miner", "--nats", url, "--config", cfg)
	work := start(t, cliEnv(t, homes["c"]), "machine-c", "skein", "up", "--roles", "executor,toolhost", "--nats", url, "--config", cfg)
	waitForLine(t, front, "skein roles up: memoryd, gateway, planner, miner")
	waitForLine(t, work, "skein roles up: toolhost, executor")

	client := cliEnv(t, homes["client"])
	r := skein(t, dir, client, "", "run", "--nats", url, "--config", "agent.offline.yaml", "--json", "--session-id", "three-machines", "Greet Ada")
	if r.code != 0 {
		t.Fatalf("run across three processes: %s", r)
	}
	if res := parseRunJSON(t, r); res.Outcome != "success_with_recovery" || !strings.Contains(res.FinalText, "Hello, Ada") || res.Usage.Turns < 2 {
		t.Errorf("run across three processes: %+v", res)
	}
	// The trace files are written where the gateway runs (B): the client's summary names the
	// command to read the trace, with the URL it was given, and no file that is not there.
	r = skein(t, dir, client, "", "run", "--nats", url, "--config", "agent.offline.yaml", "Greet Ada")
	if r.code != 0 || !strings.Contains(r.stdout, "trace: skein trace show --nats "+url+" ") || strings.Contains(r.stdout, "(files:") {
		t.Errorf("run --nats from another home: want the trace command with --nats and no file path; %s", r)
	}
	if _, err := os.Stat(filepath.Join(homes["b"], "traces", "three-machines.jsonl")); err != nil {
		t.Errorf("the gateway's machine has no trace file: %v", err)
	}

	// The miner (B) mines the session into memoryd (B): the lesson is in memory.
	poll.Eventually(t, 90*time.Second, "the lesson of the run in memory", func() error {
		r := skein(t, dir, client, "", "memory", "list", "--json", "--nats", url)
		if r.code != 0 {
			return fmt.Errorf("memory list: %s", r)
		}
		var entries []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
			return err
		}
		if len(entries) == 0 {
			return fmt.Errorf("no entry yet")
		}
		return nil
	})

	// On A, a read-only command with the server's home and no URL finds the running server.
	r = skein(t, base, envA, "", "trace", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "three-machines") {
		t.Errorf("trace list on the server's home without --nats: %s", r)
	}

	for _, p := range []*proc{work, front, server} {
		p.stop()
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s after SIGTERM: exit %d; want 0", p.name, code)
		}
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Errorf("%s was killed by %v; it should exit on SIGTERM by itself", p.name, ws.Signal())
		}
	}
}

// copyCreds gives a machine's home the credentials files of ids from the server's home, and
// nothing else, as an operator copies them.
func copyCreds(t *testing.T, from, to string, ids ...string) {
	t.Helper()
	dst := filepath.Join(to, "creds")
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		b, err := os.ReadFile(filepath.Join(from, "creds", id+".nk"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, id+".nk"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
