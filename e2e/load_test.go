package e2e

// The load runner shared by the soak, overhead and scaling runs: a mesh started with `skein up`
// (its profiles served with --pprof), a generator that keeps a number of sessions in flight the
// way `skein run --nats` does (submit, then follow the trace to the end), and the figures an
// operator would look at: sessions/s, latency percentiles, consumers per stream, goroutines, RSS
// and CPU per role.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/trace"
)

// upMesh is a `skein up` process and a client connection to it.
type upMesh struct {
	p     *proc
	home  string
	url   string
	pprof string
	c     *bus.Conn
	names protocol.Names
}

// startUp runs `skein up` with the config at cfgPath and waits until it serves.
func startUp(t *testing.T, cfgPath string, extra ...string) *upMesh {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	listen, pp := freePort(t), freePort(t)
	args := append([]string{"up", "--listen", listen, "--pprof", pp, "--config", cfgPath}, extra...)
	p := start(t, cliEnv(t, home), "skein-up", "skein", args...)
	waitForLine(t, p, "skein mesh up")
	m := &upMesh{p: p, home: home, url: "nats://" + listen, pprof: pp, names: protocol.NewNames("")}
	// The test (and the processes it starts, e.g. the overhead benchmark's echo responder)
	// connects as admin with the credentials `skein up` wrote into its home.
	t.Setenv("SKEIN_CREDS_DIR", auth.Dir(home))
	m.c = connect(t, m.url)
	return m
}

// sessionResult is one generated session.
type sessionResult struct {
	start, end time.Time
	outcome    protocol.Outcome
	err        error
}

func (r sessionResult) latency() time.Duration { return r.end.Sub(r.start) }

// runSession submits task and follows its trace until the planner's usage event, the end of
// the session as `skein run` sees it (the miner works on afterwards).
func runSession(ctx context.Context, c *bus.Conn, task string) sessionResult {
	r := sessionResult{start: time.Now()}
	id, err := sessiontest.Send(ctx, c, meshNames, protocol.SubmitRequest{Task: task, Caller: "e2e"})
	if err != nil {
		r.err, r.end = err, time.Now()
		return r
	}
	r.err = trace.Follow(ctx, c.JS, protocol.NewNames(""), id, func(ev protocol.Event) bool {
		if ev.Type.Terminal() {
			r.outcome = ev.Outcome
		}
		return !(ev.Type == protocol.EvUsage && ev.Role != protocol.RoleMiner)
	})
	r.end = time.Now()
	if r.err == nil && r.outcome == "" {
		r.err = fmt.Errorf("session %s: no outcome", id)
	}
	return r
}

// generate keeps `workers` sessions in flight until `until` (or n sessions, when n > 0).
func generate(ctx context.Context, c *bus.Conn, workers, n int, until time.Time, task func(i int) string) []sessionResult {
	var mu sync.Mutex
	var out []sessionResult
	next := 0
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if (n > 0 && next >= n) || (n <= 0 && time.Now().After(until)) || ctx.Err() != nil {
			return 0, false
		}
		next++
		return next - 1, true
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i, ok := take()
				if !ok {
					return
				}
				sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				r := runSession(sctx, c, task(i))
				cancel()
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].end.Before(out[j].end) })
	return out
}

// failures counts sessions that errored or did not succeed.
func failures(rs []sessionResult) (n int, first string) {
	for _, r := range rs {
		if r.err != nil || !r.outcome.Succeeded() {
			if n == 0 {
				first = fmt.Sprintf("outcome %q err %v", r.outcome, r.err)
			}
			n++
		}
	}
	return n, first
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func latencies(rs []sessionResult) []time.Duration {
	out := make([]time.Duration, len(rs))
	for i, r := range rs {
		out[i] = r.latency()
	}
	return out
}

// meshStats is what the runner samples from the mesh process at a point in time.
type meshStats struct {
	consumers  map[string]int
	backlog    int // messages the mesh's consumers have not yet handled (pending and unacked)
	goroutines int
	rssKB      int64
	heapMB     float64       // live Go heap after a GC (RSS also holds freed pages, ONNX, stacks)
	cpu        time.Duration // user+system CPU of the process so far
}

func (s meshStats) String() string {
	keys := make([]string, 0, len(s.consumers))
	for k := range s.consumers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var cs []string
	for _, k := range keys {
		cs = append(cs, fmt.Sprintf("%s=%d", k, s.consumers[k]))
	}
	return fmt.Sprintf("consumers %s; goroutines %d; RSS %.0f MB; live heap %.0f MB", strings.Join(cs, " "), s.goroutines,
		float64(s.rssKB)/1024, s.heapMB)
}

func (m *upMesh) stats(ctx context.Context, t *testing.T) meshStats {
	t.Helper()
	s := meshStats{}
	s.consumers, s.backlog = m.queues(ctx, t)
	s.goroutines = goroutines(t, m.pprof)
	s.heapMB = liveHeapMB(t, m.pprof)
	s.rssKB, s.cpu = procUsage(m.p.cmd.Process.Pid)
	return s
}

// queues counts the consumers of each of the mesh's streams and the messages they have not yet
// handled (pending and unacked): cheap enough to poll, unlike the rest of stats.
func (m *upMesh) queues(ctx context.Context, t *testing.T) (map[string]int, int) {
	t.Helper()
	consumers, backlog := map[string]int{}, 0
	for _, name := range []string{protocol.StreamTasks, protocol.StreamWork, protocol.StreamResults, protocol.StreamTrace, protocol.StreamUsage, protocol.StreamDLQ} {
		st, err := m.c.JS.Stream(ctx, m.names.Stream(name))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		consumers[name] = info.State.Consumers
		for ci := range st.ListConsumers(ctx).Info() {
			backlog += int(ci.NumPending) + ci.NumAckPending
		}
	}
	return consumers, backlog
}

// liveHeapMB reads the in-use heap from a --pprof endpoint, after a GC.
func liveHeapMB(t *testing.T, addr string) float64 { return liveHeap(t, addr).total }

// heapShares is the live heap of a process after a GC, in MB, split by who holds it.
type heapShares struct {
	total float64
	by    map[string]float64 // by heapHolders
}

// heapHolders are the holders of `skein up`'s live heap, in the order reports show them: the
// embedded NATS server and four parts of it, each role, and the rest.
//   - server:subjects is the stream's index of the subjects it holds (one entry per subject, for
//     as long as the stream keeps a message on it: per retained session);
//   - server:blocks is the per-block subject state of the blocks written or read in the last
//     2 minutes (the server drops it after that);
//   - server:msg-ids are the message ids kept for duplicate detection (the dedup windows);
//   - server:replies are the one-reply grants of the identities that serve (auth.ResponseTTL).
//
// A role holds what goroutines of its own (the services it runs, its handlers called by the
// NATS client) allocated and still reference; "other" is the runtime, the NATS client's buffers
// and what was loaded at start outside any role.
var heapHolders = []string{"server", "server:subjects", "server:blocks", "server:msg-ids", "server:replies",
	"planner", "executor", "toolhost", "memoryd", "miner", "gateway", "other"}

var roleModules = []string{"planner", "executor", "toolhost", "memoryd", "miner", "gateway"}

// heapHolder says who holds the memory of one heap profile sample, from its allocation stack;
// a sample of the server also gets the part of it (server:...), or "".
func heapHolder(s *profile.Sample) (who, part string) {
	var funcs []string // leaf first
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil {
				funcs = append(funcs, l.Function.Name)
			}
		}
	}
	const srv = "github.com/nats-io/nats-server/v2/"
	if slices.ContainsFunc(funcs, func(f string) bool { return strings.HasPrefix(f, srv) }) {
		for _, f := range funcs {
			switch {
			case strings.Contains(f, "/server/stree."):
				// The stream-wide index is a tree of psi values (total, first and last block).
				if slices.ContainsFunc(funcs, func(f string) bool { return strings.Contains(f, "server.total uint64") }) {
					return "server", "server:subjects"
				}
				return "server", "server:blocks"
			case strings.Contains(f, "(*stream).storeMsgId"), strings.HasSuffix(f, "server.getMsgId"):
				return "server", "server:msg-ids"
			}
		}
		for _, f := range funcs {
			if strings.HasPrefix(f, srv) {
				if strings.HasSuffix(f, "(*client).deliverMsg") {
					return "server", "server:replies"
				}
				break
			}
		}
		return "server", ""
	}
	// The outermost frame of a role: an executor calling memoryd's client is the executor.
	for i := len(funcs) - 1; i >= 0; i-- {
		for _, r := range roleModules {
			if p := "github.com/skein-mesh/skein/" + r; strings.HasPrefix(funcs[i], p+".") || strings.HasPrefix(funcs[i], p+"/") {
				return r, ""
			}
		}
	}
	return "other", ""
}

// liveHeap reads a heap profile from a --pprof endpoint, after a GC, and splits it by heapHolder.
func liveHeap(t *testing.T, addr string) heapShares {
	t.Helper()
	// One GC leaves what sync.Pools held in their victim caches (the server pools its 8 MiB
	// block buffers): a first profile's GC moves them there, the second's frees them, so that a
	// sample does not count idle buffers some times and not others.
	if resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1"); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p, err := profile.Parse(resp.Body)
	if err != nil {
		t.Fatalf("heap profile: %v", err)
	}
	h := heapShares{by: map[string]float64{}}
	vi := slices.IndexFunc(p.SampleType, func(st *profile.ValueType) bool { return st.Type == "inuse_space" })
	if vi < 0 {
		return h
	}
	for _, s := range p.Sample {
		mb := float64(s.Value[vi]) / (1 << 20)
		who, part := heapHolder(s)
		h.total += mb
		h.by[who] += mb
		if part != "" {
			h.by[part] += mb
		}
	}
	return h
}

// goroutines reads the goroutine count from a --pprof endpoint.
// topGoroutines is the start of a --pprof goroutine profile: the most common stacks first.
func topGoroutines(t *testing.T, addr string, n int) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	stacks := strings.Split(string(body), "\n\n")
	return strings.Join(stacks[:min(n+1, len(stacks))], "\n\n")
}

func goroutines(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "goroutine profile: total")))
	if err != nil {
		t.Fatalf("goroutine profile header %q: %v", line, err)
	}
	return n
}

// procUsage reads a process's resident memory and CPU time from /proc.
func procUsage(pid int) (rssKB int64, cpu time.Duration) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				rssKB, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name (which may hold spaces) start at the last ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 13 {
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			cpu = time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
		}
	}
	return rssKB, cpu
}

// roleCPU takes a CPU profile of `skein up` for d and splits it by the role label the embedded
// mesh puts on each service's goroutines.
func roleCPU(t *testing.T, addr string, d time.Duration) map[string]time.Duration {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, max(1, int(d.Seconds()))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(body)
	if err != nil {
		t.Fatalf("cpu profile: %v", err)
	}
	vi := len(p.SampleType) - 1 // cpu nanoseconds
	out := map[string]time.Duration{}
	for _, s := range p.Sample {
		role := "runtime/unlabeled"
		if r := s.Label["role"]; len(r) > 0 {
			role = r[0]
		}
		out[role] += time.Duration(s.Value[vi])
	}
	return out
}

func formatCPU(cpu map[string]time.Duration, over time.Duration) string {
	keys := make([]string, 0, len(cpu))
	var total time.Duration
	for k, v := range cpu {
		keys = append(keys, k)
		total += v
	}
	sort.Slice(keys, func(i, j int) bool { return cpu[keys[i]] > cpu[keys[j]] })
	var b strings.Builder
	fmt.Fprintf(&b, "CPU per role over %s (%.2f cores in all):", over, total.Seconds()/over.Seconds())
	for _, k := range keys {
		fmt.Fprintf(&b, " %s %.0f%%", k, 100*cpu[k].Seconds()/total.Seconds())
	}
	return b.String()
}
