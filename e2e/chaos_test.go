//go:build chaos

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// The chaos suite (`make chaos`, not part of `make test`): a 3-node NATS cluster built from the
// nats-server module with the permission matrix (pkg/auth) rendered into each node's config, R3
// streams and buckets, 2 executors, 2 toolhosts, 2 planners, memoryd, the miner and a gateway,
// each its own process with its own identity, memory on (the KV store and MiniLM). Sessions arrive
// at a steady rate below the mesh's capacity, so latency and recovery are not a queue's; their
// tool appends to a side-effect log. An executor, a toolhost, a planner, memoryd and one NATS node
// are killed with SIGKILL in turn and started again.

const chaosAgent = assistantAgent + `tools:
  manifest_dirs: [$TESTTOOLS]
mesh:
  nats_url: $NATS_URLS
  replicas: 3
`

// The miner's compression calls get a guideline a model would write; sessions call the effect tool
// once and answer. The tool's wait ($TOOL_S) keeps several sessions in flight on every part, so
// each kill catches work on the killed process.
const chaosScript = `
rules:
  - when: {system: "skein-miner"}
    reply: {text: "To record an effect, call the effect tool once with a short note."}
  - when: {last: "appended"}
    reply: {text: "effect done"}
  - when: {last: "^effect"}
    reply:
      tool_calls: [{name: effect, args: {note: "x", seconds: $TOOL_S}}]
`

func freePortNum(t *testing.T) int {
	t.Helper()
	_, port, _ := strings.Cut(freePort(t), ":")
	var n int
	fmt.Sscan(port, &n)
	return n
}

type natsNode struct {
	name, conf string
	p          *proc
	logs       []string // one per start
}

// newNATSNode writes a node's config: its ports, store, routes and the rendered permission
// matrix, whose public keys the server reads from the environment (auth.EnvKey), as
// deploy/nats/*.conf do.
func newNATSNode(t *testing.T, name string, port, cluster int, routes []string, authConf string) *natsNode {
	t.Helper()
	conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n}\n"+
		"cluster {\n  name: skein-chaos\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n%s",
		name, port, t.TempDir(), cluster, strings.Join(routes, ", "), authConf)
	path := filepath.Join(t.TempDir(), name+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return &natsNode{name: name, conf: path}
}

func (n *natsNode) start(t *testing.T, bin string, env []string) {
	n.p = start(t, env, n.name, bin, "-c", n.conf) // bin is a path: start runs it as it is
	n.logs = append(n.logs, n.p.log)
}

type sample struct {
	id                  string
	phase               string
	submitted, finished time.Time       // finished: its successful terminal event
	sources             map[string]bool // the processes that wrote its events
	events              []protocol.Event
}

// timeline is a session's events as offsets from its submit, with their writers: where the
// slowest session after a kill spent its time.
func (s *sample) timeline() string {
	var b strings.Builder
	for i, ev := range s.events {
		if i == 24 {
			fmt.Fprintf(&b, " ... (%d more)", len(s.events)-i)
			break
		}
		what := string(ev.Type)
		if ev.Tool != "" {
			what += " " + ev.Tool
		}
		if ev.Attrs["attempt"] != "" {
			what += " (" + ev.Attrs["attempt"] + ")"
		}
		fmt.Fprintf(&b, "\n          +%5.1fs %-22s %s", ev.Time.Sub(s.submitted).Seconds(), what, ev.Source)
	}
	return b.String()
}

func TestChaos(t *testing.T) {
	k := chaosStart(t)
	rate, toolWait, calmFor, drain := k.rate, k.toolWait, k.calmFor, k.drain
	gap := chaosSeconds(t, "SKEIN_CHAOS_GAP_S", 30) // between one fault and the next

	bins := binaries(t)
	natsBin := filepath.Join(bins, "nats-server")
	build := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2")
	build.Dir = filepath.Join(devtest.RepoRoot(t), "pkg")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}

	// Authentication as in production: one credentials file per identity; the nodes get the
	// public keys, every role its own identity through $SKEIN_CREDS_DIR.
	creds := t.TempDir()
	pub, err := auth.Ensure(creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SKEIN_CREDS_DIR", creds)
	var natsEnv []string
	for id, key := range pub {
		natsEnv = append(natsEnv, auth.EnvKey(id)+"="+key)
	}
	names := protocol.NewNames("")
	authConf := auth.RenderConf(names)

	nodes := make([]*natsNode, 3)
	ports, clusters := make([]int, 3), make([]int, 3)
	var routes, urls []string
	for i := range nodes {
		ports[i], clusters[i] = freePortNum(t), freePortNum(t)
		routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", clusters[i])))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	for i := range nodes {
		nodes[i] = newNATSNode(t, fmt.Sprintf("nats-%d", i+1), ports[i], clusters[i], routes, authConf)
		nodes[i].start(t, natsBin, natsEnv)
	}
	url := strings.Join(urls, ",")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c, err := bus.Connect(ctx, url, "chaos", time.Minute, bus.WithCreds(auth.Resolve(auth.Admin, auth.Source{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	limits := bus.DefaultLimits()
	limits.Replicas = 3
	poll.True(t, 2*time.Minute, "the cluster to provision R3 streams", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		_, err := bus.ProvisionWith(pctx, c.JS, names, limits, bus.ProvisionOptions{})
		return err == nil
	})

	cfg := writeProject(t, strings.ReplaceAll(chaosAgent, "$NATS_URLS", `"`+url+`"`), k.script())
	effectsLog := effectLog(t)
	env := []string{"SKEIN_HOME=" + t.TempDir(), "EFFECT_LOG=" + effectsLog}
	args := []string{"--nats", url, "--config", cfg}
	roles := map[string]*proc{}
	var roleLogs []string // every start's, restarts included
	run := func(name, bin string) {
		roles[name] = start(t, env, name, bin, args...)
		roleLogs = append(roleLogs, roles[name].log)
	}
	for _, r := range []struct{ name, bin string }{
		{"memoryd", "memoryd"}, {"miner", "miner"},
		{"toolhost-1", "toolhost"}, {"toolhost-2", "toolhost"}, {"executor-1", "executor"}, {"executor-2", "executor"},
		{"planner-1", "planner"}, {"planner-2", "planner"}, {"gateway", "gateway"},
	} {
		run(r.name, r.bin)
	}
	bustest.WaitAgent(t, c, meshNames, "assistant")
	bustest.WaitPullers(t, c, meshNames, "assistant", 2)
	waitMemoryd(t, c)

	var mu sync.Mutex
	var samples []*sample
	var submits sync.WaitGroup
	// submitOne sends one session without holding up the next arrival. A submit refused with a
	// transient error (a stream leader election during a node's death) is sent again with the
	// same session id, as a client should: it makes one session.
	submitOne := func(phase string, i int) {
		submits.Add(1)
		go func() {
			defer submits.Done()
			s := &sample{id: fmt.Sprintf("chaos-%s-%d", phase, i), phase: phase, submitted: time.Now()}
			req := protocol.SubmitRequest{Task: fmt.Sprintf("effect please (%s %d)", phase, i), SessionID: s.id, Caller: "e2e"}
			var err error
			for try := 0; try < 30; try++ {
				if _, err = sessiontest.Send(ctx, c, meshNames, req); err == nil {
					break
				}
				// pacing: the client sends a refused task again a second later, as
				// chaos_disk_test.go's clients do; its load during the fault is part of the run.
				time.Sleep(time.Second)
			}
			if err != nil {
				t.Errorf("submit %s: %v", s.id, err)
				return
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}()
	}
	arrive := func(phase string, stop <-chan struct{}) {
		k.arrive(0, stop, func(i int) { submitOne(phase, i) })
	}
	arrive("calm", closeAfter(calmFor))
	submits.Wait()
	mu.Lock()
	calmIDs := ids(samples)
	mu.Unlock()
	if left := waitDone(ctx, t, c, calmIDs, drain); len(left) > 0 {
		t.Errorf("%d calm sessions still running %s after the last arrival: %v", len(left), drain, left)
	}

	// Faults: one role (or node) at a time, killed with SIGKILL and started again 3 s later, the
	// next one gap after, while sessions keep arriving at the same rate.
	type fault struct {
		what    string
		kill    func()
		restart func()
		killed  time.Time
		signed  func(source string) bool // whether the killed process wrote an event; nil: any session counts
	}
	// Executors and planners sign their events <role>@<host>/<pid>, a toolhost
	// toolhost@<host>-<pid>-<random>.
	signature := func(name string) func(string) bool {
		pid := roles[name].cmd.Process.Pid
		return func(src string) bool {
			return strings.HasSuffix(src, fmt.Sprintf("/%d", pid)) ||
				strings.HasPrefix(src, "toolhost@") && strings.Contains(src, fmt.Sprintf("-%d-", pid))
		}
	}
	// memoryd writes no trace events: every session running at its kill counts as hit. A role
	// started again takes its name back, so it can be killed again.
	killRole := func(name, bin string) *fault {
		f := &fault{what: name, restart: func() { run(name, bin) }}
		f.kill = func() {
			if bin != "memoryd" {
				f.signed = signature(name)
			}
			roles[name].kill()
		}
		return f
	}
	// SKEIN_CHAOS_FAULTS picks the faults and their order (a role may come back and be killed
	// again), e.g. executor-1,toolhost-1,executor-2,toolhost-2 for the recovery figures alone.
	faultNames := strings.Split(cmp.Or(os.Getenv("SKEIN_CHAOS_FAULTS"), "executor-1,toolhost-1,planner-1,memoryd,nats-2"), ",")
	var faults []*fault
	for _, name := range faultNames {
		switch name = strings.TrimSpace(name); {
		case name == "nats-2":
			faults = append(faults, &fault{what: name, kill: func() { nodes[1].p.kill() }, restart: func() { nodes[1].start(t, natsBin, natsEnv) }})
		case roles[name] != nil:
			faults = append(faults, killRole(name, strings.TrimRight(name, "-0123456789")))
		default:
			t.Fatalf("SKEIN_CHAOS_FAULTS: no role or node %q (roles: memoryd, miner, toolhost-1, toolhost-2, executor-1, executor-2, planner-1, planner-2, gateway; node: nats-2)", name)
		}
	}
	stop := make(chan struct{})
	arrived := make(chan struct{})
	go func() { arrive("faults", stop); close(arrived) }()
	// The schedule of the faults, each killed gap/2 into its slot and started again 3 s later,
	// is what the run measures recovery from.
	for _, f := range faults {
		time.Sleep(gap / 2) // fault injection: half a slot before the kill
		f.killed = time.Now()
		f.kill()
		time.Sleep(3 * time.Second) // fault injection: down for 3 s
		f.restart()
		time.Sleep(gap/2 - 3*time.Second) // fault injection: the rest of the slot
	}
	close(stop)
	<-arrived
	submits.Wait()
	running := map[string]bool{}
	for _, id := range waitDone(ctx, t, c, ids(samples), drain) {
		running[id] = true
	}

	// Outcomes and latencies from the traces.
	lat := map[string][]time.Duration{}
	ends := newTally(drain, func(o protocol.Outcome) bool { return o == protocol.OutcomeSuccess })
	for _, s := range samples {
		evs, end := ends.count(ctx, t, c, s.id, running[s.id])
		s.sources = map[string]bool{}
		s.events = evs
		for _, ev := range evs {
			s.sources[ev.Source] = true
		}
		if end == nil {
			continue
		}
		s.finished = end.Time
		lat[s.phase] = append(lat[s.phase], end.Time.Sub(s.submitted))
	}
	dups, reruns := effects(t, effectsLog)
	// What the mesh dead-lettered, and how often a stream or consumer lost its quorum (a node's
	// death, or raft heartbeats starved on a loaded machine), from the nodes' logs.
	dead := deadLetters(ctx, c)
	stalls, refused := 0, 0
	for _, n := range nodes {
		for _, l := range n.logs {
			if b, err := os.ReadFile(l); err == nil {
				stalls += strings.Count(string(b), "has NO quorum")
			}
		}
	}
	// A role refused by the permission matrix (a reply, a publish) lost something even if the
	// session recovered: the matrix must allow what the mesh does under faults too.
	for _, l := range roleLogs {
		if b, err := os.ReadFile(l); err == nil {
			refused += strings.Count(string(b), "Permissions Violation")
		}
	}
	var report strings.Builder
	fmt.Fprintf(&report, "calm %s, faults %s apart (restart 3 s after the kill)\n", calmFor, gap)
	fmt.Fprintf(&report, "arrivals %.1f/s, tool wait %.1f s\n", rate, toolWait)
	ends.write(&report, len(samples), dups, reruns)
	fmt.Fprintf(&report, "dead-lettered messages %d; stream or consumer quorum losses logged by the nodes %d; permission refusals logged by the roles %d\n", dead, stalls, refused)
	calmP50 := pct(lat["calm"], 50)
	for _, ph := range []string{"calm", "faults"} {
		fmt.Fprintf(&report, "%s: %d sessions, p50 %s, p99 %s, max %s\n", ph, len(lat[ph]), pct(lat[ph], 50), pct(lat[ph], 99), pct(lat[ph], 100))
	}
	// Recovery, per kill. "on it": the sessions running at the kill whose trace the killed process
	// had written to (for memoryd and a NATS node, every session running at the kill), and the
	// time from the kill until the last of them succeeded: how long the work the fault hit took
	// to complete. "new work": from the kill until the first success of a session submitted
	// after it: how long until the mesh completes work again. "slowest": the worst latency of a
	// session submitted between this kill and the next.
	// "in flight": every session running at the kill, and the time from the kill until it
	// succeeded; less one session's own work (the calm median) that is what the kill cost it.
	inFlight := map[string][]time.Duration{} // by what was killed: executor, toolhost, ...
	for i, f := range faults {
		next := time.Now()
		if i+1 < len(faults) {
			next = faults[i+1].killed
		}
		firstNew, lastHit, slowest := time.Duration(-1), time.Duration(0), time.Duration(0)
		var slow *sample
		var flight []time.Duration
		hit := 0
		for _, s := range samples {
			if s.finished.IsZero() {
				continue
			}
			if s.submitted.Before(f.killed) && s.finished.After(f.killed) {
				flight = append(flight, s.finished.Sub(f.killed))
				on := f.signed == nil
				for src := range s.sources {
					on = on || f.signed(src)
				}
				if on {
					hit++
					lastHit = max(lastHit, s.finished.Sub(f.killed))
				}
			}
			if !s.submitted.Before(f.killed) && s.submitted.Before(next) {
				if d := s.finished.Sub(f.killed); firstNew < 0 || d < firstNew {
					firstNew = d
				}
				if d := s.finished.Sub(s.submitted); d > slowest {
					slowest, slow = d, s
				}
			}
		}
		first := "never"
		if firstNew >= 0 {
			first = firstNew.Round(100 * time.Millisecond).String()
		}
		kind := strings.TrimRight(f.what, "-0123456789")
		inFlight[kind] = append(inFlight[kind], flight...)
		fmt.Fprintf(&report, "kill -9 %s: %d sessions on it, the last succeeded %s after the kill; %d in flight, done %s (p50) / %s (max) after the kill; new work succeeds %s after the kill; slowest session submitted until the next fault %s\n",
			f.what, hit, lastHit.Round(100*time.Millisecond), len(flight), pct(flight, 50), pct(flight, 100), first, slowest.Round(100*time.Millisecond))
		if slow != nil && slowest > 2*calmP50 {
			fmt.Fprintf(&report, "        slowest: %s%s\n", slow.id, slow.timeline())
		}
	}
	for _, kind := range slices.Sorted(maps.Keys(inFlight)) {
		ds := inFlight[kind]
		fmt.Fprintf(&report, "sessions in flight at a kill of a %s: %d, done after the kill p50 %s, p99 %s; less one session's own work (calm p50 %s): p99 %s\n",
			kind, len(ds), pct(ds, 50), pct(ds, 99), calmP50, pct(ds, 99)-calmP50)
	}
	// Work done twice: a step started again by a second executor. In the calm phase nothing was
	// killed, so any is a redelivery of a live executor's step (a heartbeat late past AckWait).
	again := map[string]int{}
	for _, s := range samples {
		starts := map[string]int{}
		for _, ev := range s.events {
			if ev.Type == protocol.EvStepStarted {
				starts[ev.StepID]++
			}
		}
		for _, n := range starts {
			again[s.phase] += n - 1
		}
	}
	fmt.Fprintf(&report, "steps started again: %d in the calm phase, %d with faults\n", again["calm"], again["faults"])
	t.Log("\n" + report.String())
	if ends.lost != 0 || ends.failed != 0 || dups != 0 || refused != 0 {
		t.Fatalf("%d sessions lost, %d failed, %d duplicated side effects, %d permission refusals", ends.lost, ends.failed, dups, refused)
	}
}

func ids(ss []*sample) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.id
	}
	return out
}
