//go:build chaos

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The chaos suite (`make chaos`, not part of `make test`): a 3-node NATS cluster built from the
// nats-server module, R3 streams and buckets, 2 executors, 2 toolhosts, 2 planners and a
// gateway, running sessions whose tool appends to a side-effect log, while an executor, a
// toolhost, a planner and a NATS node are killed with SIGKILL in turn and started again.

const chaosAgent = `
agent:
  name: assistant
  max_steps: 4
llm:
  provider: scripted
  model: scripted
  script: script.yaml
tools:
  manifest_dirs: [$FAULT_TOOLS]
memory:
  enabled: false
miner:
  enabled: false
mesh:
  nats_url: $NATS_URLS
  replicas: 3
`

const chaosScript = `
rules:
  - when: {last: "appended"}
    reply: {text: "effect done"}
  - when: {last: "^effect"}
    reply:
      tool_calls: [{name: effect, args: {note: "x", seconds: 0.5}}]
`

func freePortNum(t *testing.T) int {
	t.Helper()
	_, port, _ := strings.Cut(freePort(t), ":")
	var n int
	fmt.Sscan(port, &n)
	return n
}

type natsNode struct {
	name, store   string
	port, cluster int
	routes        string
	p             *proc
}

func (n *natsNode) start(t *testing.T, bin string) {
	n.p = startBin(t, nil, n.name, bin, "-n", n.name, "-a", "127.0.0.1", "-p", fmt.Sprint(n.port), "-js", "-sd", n.store,
		"--cluster_name", "skein-chaos", "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", n.cluster), "--routes", n.routes)
}

// startBin is start for a binary given by path.
func startBin(t *testing.T, env []string, name, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() { p.stop() })
	return p
}

type sample struct {
	id        string
	submitted time.Time
	phase     string
}

func TestChaos(t *testing.T) {
	devtest.NeedProgram(t, "python3")
	bins := binaries(t)
	natsBin := filepath.Join(bins, "nats-server")
	build := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2")
	build.Dir = filepath.Join(devtest.RepoRoot(t), "pkg")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}

	nodes := make([]*natsNode, 3)
	var routes, urls []string
	for i := range nodes {
		nodes[i] = &natsNode{name: fmt.Sprintf("nats-%d", i+1), store: t.TempDir(), port: freePortNum(t), cluster: freePortNum(t)}
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", nodes[i].cluster))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", nodes[i].port))
	}
	for _, n := range nodes {
		n.routes = strings.Join(routes, ",")
		n.start(t, natsBin)
	}
	url := strings.Join(urls, ",")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c, err := bus.Connect(ctx, url, "chaos", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	names := protocol.NewNames("")
	limits := bus.DefaultLimits()
	limits.Replicas = 3
	waitFor(ctx, t, "the cluster to provision R3 streams", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		_, err := bus.ProvisionWith(pctx, c.JS, names, limits, bus.ProvisionOptions{})
		return err == nil
	})

	tools := filepath.Join(devtest.RepoRoot(t), "e2e", "testdata", "tools")
	cfg := writeProject(t, strings.NewReplacer("$FAULT_TOOLS", tools, "$NATS_URLS", `"`+url+`"`).Replace(chaosAgent), chaosScript)
	effects := filepath.Join(writableTempDir(t), "effects.jsonl")
	env := []string{"SKEIN_HOME=" + t.TempDir(), "EFFECT_LOG=" + effects}
	args := []string{"--nats", url, "--config", cfg}
	roles := map[string]*proc{}
	run := func(name, bin string) { roles[name] = start(t, env, name, bin, args...) }
	for _, r := range []struct{ name, bin string }{
		{"toolhost-1", "toolhost"}, {"toolhost-2", "toolhost"}, {"executor-1", "executor"}, {"executor-2", "executor"},
		{"planner-1", "planner"}, {"planner-2", "planner"}, {"gateway", "gateway"},
	} {
		run(r.name, r.bin)
	}
	waitAgent(t, c, "assistant")
	waitPullers(t, c, "assistant", 2)

	var mu sync.Mutex
	var samples []sample
	submitOne := func(phase string, i int) string {
		id := fmt.Sprintf("chaos-%s-%d", phase, i)
		at := time.Now()
		// A submit refused with a transient error (a stream leader election during a node's
		// death) is sent again with the same session id, as a client should: it makes one session.
		var err error
		for try := 0; try < 30; try++ {
			if _, err = submit(ctx, c, fmt.Sprintf("effect please (%s %d)", phase, i), id); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Errorf("submit %s: %v", id, err)
			return id
		}
		mu.Lock()
		samples = append(samples, sample{id: id, submitted: at, phase: phase})
		mu.Unlock()
		return id
	}
	const baseline, faulted = 60, 240
	for i := range baseline {
		submitOne("calm", i)
		time.Sleep(100 * time.Millisecond)
	}
	waitDone(ctx, t, c, ids(samples))

	// Faults: one role (or node) at a time, killed with SIGKILL and started again after 3 s,
	// while sessions keep arriving. A probe session submitted at the kill measures recovery.
	type fault struct {
		what    string
		kill    func()
		restart func()
	}
	killRole := func(name, bin string) fault {
		return fault{what: name, kill: func() { roles[name].kill() }, restart: func() { run(name+"-again", bin) }}
	}
	faults := []fault{
		killRole("executor-1", "executor"), killRole("toolhost-1", "toolhost"), killRole("planner-1", "planner"),
		{what: "nats-2", kill: func() { nodes[1].p.kill() }, restart: func() { nodes[1].start(t, natsBin) }},
	}
	probes := map[string]string{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range faulted {
			submitOne("faults", i)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	for _, f := range faults {
		time.Sleep(5 * time.Second)
		f.kill()
		probes[f.what] = submitOne("probe-"+f.what, 0)
		time.Sleep(3 * time.Second)
		f.restart()
	}
	<-done
	waitDone(ctx, t, c, ids(samples))

	// Outcomes and latencies from the traces.
	lat := map[string][]time.Duration{}
	byID := map[string]time.Duration{}
	finished, lost := 0, 0
	for _, s := range samples {
		// The session record says done before the planner's last events are stored: follow the
		// trace to its usage event.
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		evs, err := waitSession(wctx, c, s.id)
		wcancel()
		if err != nil {
			t.Errorf("session %s: %v", s.id, err)
		}
		var end *protocol.Event
		for i := range evs {
			if evs[i].Type.Terminal() {
				end = &evs[i]
			}
		}
		if end == nil || end.Outcome != protocol.OutcomeSuccess {
			lost++
			t.Errorf("session %s did not succeed: %+v", s.id, end)
			continue
		}
		finished++
		d := end.Time.Sub(s.submitted)
		byID[s.id] = d
		phase := s.phase
		if strings.HasPrefix(phase, "probe") {
			continue
		}
		lat[phase] = append(lat[phase], d)
	}
	// The tool appends an attempt line per run and the effect only once per call id (it is
	// idempotent by its id, as a tool with real effects should be): runs are counted apart from
	// effects, so a call the mesh ran twice shows as a re-run even when its effect did not repeat.
	attempts, effected := map[string]int{}, map[string]int{}
	f, err := os.Open(effects)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct{ Env, Kind string }
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		switch l.Kind {
		case "attempt":
			attempts[l.Env]++
		case "effect":
			effected[l.Env]++
		}
	}
	f.Close()
	dups, reruns := 0, 0
	for _, n := range effected {
		dups += n - 1
	}
	for _, n := range attempts {
		reruns += n - 1
	}
	report := fmt.Sprintf("accepted %d, finished %d, lost %d, duplicated side effects %d (tool runs repeated by the mesh: %d)\n",
		len(samples), finished, lost, dups, reruns)
	for _, ph := range []string{"calm", "faults"} {
		report += fmt.Sprintf("%s: %d sessions, p50 %s, p99 %s\n", ph, len(lat[ph]), pct(lat[ph], 50), pct(lat[ph], 99))
	}
	for _, f := range faults {
		report += fmt.Sprintf("recovery after kill -9 %s: a session submitted at the kill finished in %s\n", f.what, byID[probes[f.what]].Round(100*time.Millisecond))
	}
	t.Log("\n" + report)
	if lost != 0 || dups != 0 {
		t.Fatalf("lost %d sessions, %d duplicated side effects", lost, dups)
	}
}

func ids(ss []sample) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.id
	}
	return out
}

// waitDone waits until every session's record says done.
func waitDone(ctx context.Context, t *testing.T, c *bus.Conn, ids []string) {
	t.Helper()
	kv, err := bus.KV(ctx, c.JS, protocol.NewNames(""), protocol.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, fmt.Sprintf("%d sessions to finish", len(ids)), func() bool {
		for _, id := range ids {
			e, err := kv.Get(ctx, id)
			if err != nil {
				return false
			}
			var s protocol.Session
			if protocol.Unmarshal(e.Value(), &s) != nil || s.Status != protocol.StatusDone {
				return false
			}
		}
		return true
	})
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)].Round(10 * time.Millisecond)
}
