package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// diskScript: one call of the sum tool after a second's thought, so sessions are in flight on
// every part of the mesh when the disk fills, then an answer.
const diskScript = `
rules:
  - when: {last: "^add"}
    delay_s: 1
    reply:
      tool_calls:
        - {name: sum, args: {numbers: [2, 3, 5]}}
  - reply: {text: "The total is 10."}
`

// TestAFullDiskLosesNoAcceptedSession runs the whole embedded mesh (as `skein up`) with its home
// on a small real filesystem, submits sessions at a steady rate, fills the filesystem to the last
// byte for 40 s and frees it again. Every session the mesh accepted succeeds (none stays running,
// none fails for the full disk: its work waits), new sessions are refused meanwhile with 503
// storage_full over HTTP, code storage_full on NATS and exit 75 from the CLI (never 422), the
// health says why, the server's own "no space left on device" is in the log, and once space is
// freed the mesh runs sessions again without a restart.
func TestAFullDiskLosesNoAcceptedSession(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole mesh")
	}
	home := bustest.Tmpfs(t, 48<<20)
	root := devtest.RepoRoot(t)
	buildSum(t, root)
	cfg := config.Default()
	useScript(t, cfg, diskScript)
	cfg.Tools.ManifestDirs, cfg.Tools.Enabled = []string{filepath.Join(root, "examples", "tools")}, []string{"sum"}
	cfg.Memory.Enabled, cfg.Miner.Enabled = false, false
	cfg.Mesh.StorageReserve = 8 << 20
	var logs devtest.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m := upInProcess(ctx, t, cfg, home, log, addr)
	c := connAs(t, m, auth.Client)
	names := protocol.NewNames(cfg.Mesh.Namespace)
	token, _, err := gateway.HTTPToken(home, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := runToEnd(ctx, c, names, "add 2 3 5"); err != nil {
		t.Fatalf("before the disk fills: %v", err)
	}

	// Sessions arrive every 100 ms, each submitted until the mesh answers it, as a client should.
	var mu sync.Mutex
	accepted := map[string]time.Time{}
	refused := map[string]int{} // by code
	why := map[string]string{}  // a reason per code
	submitOne := func(i int) {
		id := fmt.Sprintf("full-%d", i)
		var rep protocol.SubmitReply
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		err := bus.Request(sctx, c.NC, names.Submit(), &protocol.SubmitRequest{SessionID: id, Task: "add 2 3 5", Caller: "test"}, &rep, 15*time.Second)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			refused["no answer"]++
		case rep.Error != "":
			refused[string(rep.Code)]++
			why[string(rep.Code)] = rep.Error
		default:
			accepted[id] = time.Now()
		}
	}
	stop := make(chan struct{})
	var arrivals sync.WaitGroup
	arrivals.Add(1)
	go func() {
		defer arrivals.Done()
		// pacing: a submit every 100 ms is the arrival schedule of the load, not a wait.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			arrivals.Add(1)
			go func() { defer arrivals.Done(); submitOne(i) }()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	poll.True(t, 30*time.Second, "sessions accepted before the disk fills", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) >= 5
	})
	free := bustest.Fill(t, home, 0)
	filled := time.Now()
	poll.Eventually(t, 60*time.Second, "the mesh to say its storage is full", func() error {
		if st := c.Storage(ctx, names, true); st.State != protocol.StorageFull {
			return fmt.Errorf("storage %q: %s", st.State, st.Reason)
		}
		return nil
	})
	poll.True(t, 30*time.Second, "a submit refused with storage_full", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return refused[string(protocol.CodeStorageFull)] > 0
	})
	// Over HTTP: 503 with code storage_full, and the health says why.
	call := func(method, path, body string, into any) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp.StatusCode
	}
	var apiErr protocol.APIError
	if status := call(http.MethodPost, "/v1/tasks", `{"task": "add 2 3 5"}`, &apiErr); status != http.StatusServiceUnavailable || apiErr.Code != protocol.CodeStorageFull {
		t.Errorf("HTTP submit on a full disk: %d %+v, want 503 storage_full", status, apiErr)
	}
	var health gateway.Health
	if status := call(http.MethodGet, "/v1/health", "", &health); status != http.StatusServiceUnavailable || health.OK ||
		health.Storage.State != protocol.StorageFull || !strings.Contains(health.Storage.Reason, "no space left on device") {
		t.Errorf("GET /v1/health on a full disk: %d %+v, want 503 saying the storage is full and why", status, health)
	}
	// The CLI exits 75: try again later.
	t.Chdir(t.TempDir())
	_, _, err = runCmd(t, "--nats", m.server.URL(), "--creds", auth.File(auth.Dir(home), auth.Client), "run", "--timeout", "5s", "add 2 3 5")
	if code := exitCode(err); code != protocol.ExitTempFail || !strings.Contains(fmt.Sprint(err), "storage") {
		t.Errorf("skein run on a full disk: exit %d (%v), want %d saying the storage is full", code, err, protocol.ExitTempFail)
	}
	// The disk stays full for longer than the deliveries of a step (and of a task) would last if
	// its failures used them up: held messages must not fail for it. JetStream frees blocks of
	// its own meanwhile (consumed tasks and steps): that space is taken again, as another writer
	// on the disk would; the state may pass through low, and a restart, but never accepts.
	frees := []func(){free}
	free = func() {
		for _, f := range frees {
			f()
		}
	}
	poll.Quiet(t, 40*time.Second, "the mesh refusing new sessions while the disk is full", func() error {
		if bustest.Free(t, home) > 0 {
			frees = append(frees, bustest.Fill(t, home, 0))
		}
		if st := c.Storage(ctx, names, true); st.State.Accepting() {
			return fmt.Errorf("storage %q: %s", st.State, st.Reason)
		}
		return nil
	})
	fullFor := time.Since(filled)

	free()
	freed := time.Now()
	poll.Eventually(t, 60*time.Second, "the mesh to write again once space is freed", func() error {
		if st := c.Storage(ctx, names, true); st.State != protocol.StorageOK {
			return fmt.Errorf("storage %q: %s", st.State, st.Reason)
		}
		return nil
	})
	// Each role keeps the state it was told for up to a second.
	poll.Eventually(t, 10*time.Second, "GET /v1/health to say ok once space is freed", func() error {
		if status := call(http.MethodGet, "/v1/health", "", &health); status != http.StatusOK || !health.OK || health.Storage.Restarts < 1 {
			return fmt.Errorf("%d %+v, want 200, ok, after a restart of JetStream", status, health)
		}
		return nil
	})
	// New work after the space came back.
	poll.True(t, 60*time.Second, "sessions accepted after space came back", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, at := range accepted {
			if at.After(freed) {
				return true
			}
		}
		return false
	})
	if err := runToEnd(ctx, c, names, "add 2 3 5"); err != nil {
		t.Fatalf("a session after space came back: %v", err)
	}
	recovered := time.Since(freed)
	close(stop)
	arrivals.Wait()

	// Every accepted session ends, with an outcome and a reason when it did not succeed.
	mu.Lock()
	ids := make([]string, 0, len(accepted))
	for id := range accepted {
		ids = append(ids, id)
	}
	mu.Unlock()
	kv, err := bus.KV(ctx, c.JS, names, protocol.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[protocol.Outcome]int{}
	var running []string
	err = poll.Wait(3*time.Minute, func() error {
		clear(outcomes)
		running = running[:0]
		for _, id := range ids {
			var s protocol.Session
			e, err := kv.Get(ctx, id)
			if err != nil || protocol.Unmarshal(e.Value(), &s) != nil || s.Status != protocol.StatusDone {
				running = append(running, id)
				continue
			}
			outcomes[s.Outcome]++
		}
		if len(running) > 0 {
			return fmt.Errorf("%d of %d accepted sessions not done: %v", len(running), len(ids), running)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	mu.Lock()
	t.Logf("accepted %d, refused %v; disk full for %s; a session succeeded %s after space was freed; outcomes %v; a refusal: %v",
		len(ids), refused, fullFor.Round(100*time.Millisecond), recovered.Round(100*time.Millisecond), outcomes, why[string(protocol.CodeStorageFull)])
	// Work held while the store was full resumes: it does not fail for it.
	for o, n := range outcomes {
		if !o.Succeeded() {
			t.Errorf("%d accepted sessions ended %s", n, o)
		}
	}
	if refused[string(protocol.CodeRejected)] > 0 {
		t.Errorf("%d submits refused as rejected (422) on a full disk, want storage_full", refused[string(protocol.CodeRejected)])
	}
	mu.Unlock()
	if !strings.Contains(logs.String(), "no space left on device") {
		t.Error("the embedded server's own error is not in the log")
	}
	for _, bad := range []string{"Permissions Violation", "service stopped"} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("the log says %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs.String())
	}
}

// runToEnd submits a task and follows it until the planner's usage event (mining is off).
func runToEnd(ctx context.Context, c *bus.Conn, names protocol.Names, task string) error {
	var rep protocol.SubmitReply
	if err := bus.Request(ctx, c.NC, names.Submit(), &protocol.SubmitRequest{Task: task, Caller: "test"}, &rep, 15*time.Second); err != nil {
		return err
	}
	if rep.Error != "" {
		return fmt.Errorf("submit: %s", rep.Error)
	}
	var outcome protocol.Outcome
	err := trace.Follow(ctx, c.JS, names, rep.SessionID, func(ev protocol.Event) bool {
		if ev.Type.Terminal() {
			outcome = ev.Outcome
		}
		return ev.Type != protocol.EvUsage
	})
	if err != nil {
		return fmt.Errorf("session %s: %w", rep.SessionID, err)
	}
	if !outcome.Succeeded() {
		return fmt.Errorf("session %s ended %q", rep.SessionID, outcome)
	}
	return nil
}
