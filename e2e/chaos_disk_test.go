//go:build chaos

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The disk-full scenario of the chaos suite (`make chaos-disk`, and part of `make chaos`):
// `skein up` (every role on its embedded server, memory and the miner on) with $SKEIN_HOME on a
// small tmpfs the test mounts, one more executor and one more toolhost as processes of their own
// joining it, sessions arriving over HTTP at a steady rate as clients send them (a 503 is sent
// again with the same session id a second later). Once the calm phase is over the tmpfs is
// filled to its last byte and kept full, then freed. No session the mesh accepted may be lost or
// fail, no submit may be refused as rejected (422), and the mesh must take work again without a
// restart.

const diskAgent = assistantAgent + `tools:
  manifest_dirs: [$TESTTOOLS]
mesh:
  storage_reserve: $RESERVE
`

func TestChaosDiskFull(t *testing.T) {
	k := chaosStart(t)
	rate, toolWait, calmFor, drain := k.rate, k.toolWait, k.calmFor, k.drain
	fullFor := chaosSeconds(t, "SKEIN_CHAOS_FULL_S", 60)
	afterFor := chaosSeconds(t, "SKEIN_CHAOS_AFTER_S", 30)
	diskMiB := int64(chaosSetting(t, "SKEIN_CHAOS_DISK_MIB", 64))
	reserveMiB := int64(chaosSetting(t, "SKEIN_CHAOS_RESERVE_MIB", 8))

	home := bustest.Tmpfs(t, diskMiB<<20)
	cfg := writeProject(t, strings.ReplaceAll(diskAgent, "$RESERVE", fmt.Sprint(reserveMiB<<20)), k.script())
	effectsLog := effectLog(t) // writable by every uid the sandbox runs tools as
	env := []string{"SKEIN_HOME=" + home, "EFFECT_LOG=" + effectsLog}
	natsAddr, httpAddr := freePort(t), freePort(t)
	url := "nats://" + natsAddr
	up := start(t, env, "skein-up", "skein", "up", "--listen", natsAddr, "--http", httpAddr, "--config", cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var c *bus.Conn
	poll.Eventually(t, 2*time.Minute, "skein up to take connections", func() error {
		var err error
		c, err = bus.Connect(ctx, url, "chaos-disk", 5*time.Second, bus.WithCreds(auth.File(auth.Dir(home), auth.Admin)))
		return err
	})
	t.Cleanup(c.Close)
	args := []string{"--nats", url, "--config", cfg}
	start(t, env, "executor-2", "executor", args...)
	start(t, env, "toolhost-2", "toolhost", args...)
	bustest.WaitAgent(t, c, meshNames, "assistant")
	bustest.WaitPullers(t, c, meshNames, "assistant", 2)
	waitMemoryd(t, c)
	token, err := os.ReadFile(filepath.Join(home, "http.token"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(ctx context.Context, method, path, body string, into any) (int, error) {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+httpAddr+path, strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, json.NewDecoder(resp.Body).Decode(into)
	}
	health := func() protocol.StorageReply {
		hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
		defer hcancel()
		var h struct{ Storage protocol.StorageReply }
		if _, err := call(hctx, http.MethodGet, "/v1/health", "", &h); err != nil {
			return protocol.StorageReply{Reason: err.Error()}
		}
		return h.Storage
	}

	type arrival struct {
		id                  string
		submitted, accepted time.Time
		tries               int
	}
	var mu sync.Mutex
	var accepted []*arrival
	refused := map[string]int{} // "status code" -> count
	var firstFull time.Time     // the first storage_full answer
	var submits sync.WaitGroup
	giveUp := make(chan struct{}) // closed when clients stop sending again
	submitOne := func(i int) {
		submits.Add(1)
		go func() {
			defer submits.Done()
			a := &arrival{id: fmt.Sprintf("disk-%d", i), submitted: time.Now()}
			body := fmt.Sprintf(`{"task": "effect please (%d)", "session_id": %q}`, i, a.id)
			for {
				a.tries++
				sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
				var rep struct{ Code, Error string }
				status, err := call(sctx, http.MethodPost, "/v1/tasks", body, &rep)
				scancel()
				mu.Lock()
				switch {
				case err == nil && status == http.StatusAccepted:
					a.accepted = time.Now()
					accepted = append(accepted, a)
					mu.Unlock()
					return
				case err != nil:
					refused["no answer"]++
				default:
					refused[fmt.Sprintf("%d %s", status, rep.Code)]++
					if rep.Code == string(protocol.CodeStorageFull) && firstFull.IsZero() {
						firstFull = time.Now()
					}
				}
				mu.Unlock()
				if status != http.StatusServiceUnavailable && err == nil {
					return // refused as it is: sending it again will not help
				}
				select {
				case <-giveUp:
					return
				// pacing: a client sends a 503'd task again a second later (the report says so).
				case <-time.After(time.Second):
				}
			}
		}()
	}
	next := k.arrive(0, closeAfter(calmFor), submitOne)
	filled := time.Now()
	free := bustest.Fill(t, home, 0)
	stopFull := closeAfter(fullFor)
	arrived := make(chan int, 1)
	go func() { arrived <- k.arrive(next, stopFull, submitOne) }()
	// While the disk is full the test keeps it full: space JetStream frees of its own (blocks of
	// consumed tasks and steps) is taken again, as by another writer on the disk.
	frees := []func(){free}
	var fullNoted time.Duration // how long until the health said full
	saidFull := false
	for done := false; !done; {
		if bustest.Free(t, home) > 0 {
			frees = append(frees, bustest.Fill(t, home, 0))
		}
		if !saidFull && health().State == protocol.StorageFull {
			fullNoted, saidFull = time.Since(filled), true
		}
		select {
		case <-stopFull:
			done = true
		// fault injection: what JetStream frees is taken again within 200 ms, as another
		// writer on the disk would.
		case <-time.After(200 * time.Millisecond):
		}
	}
	next = <-arrived
	if !saidFull {
		t.Errorf("GET /v1/health never said the storage is full in the %s the disk was full", fullFor)
	}
	for _, f := range frees {
		f()
	}
	freed := time.Now()
	okAfter := time.Duration(-1)
	if err := poll.Wait(2*time.Minute, func() error {
		if st := health(); st.State != protocol.StorageOK {
			return fmt.Errorf("storage %q: %s", st.State, st.Reason)
		}
		return nil
	}); err != nil {
		t.Errorf("the mesh did not write again within 2 minutes of space being freed: %v", err)
	} else {
		okAfter = time.Since(freed)
	}
	k.arrive(next, closeAfter(afterFor), submitOne)
	close(giveUp)
	submits.Wait()

	// Every accepted session must end, and succeed.
	mu.Lock()
	ids := make([]string, len(accepted))
	for i, a := range accepted {
		ids[i] = a.id
	}
	mu.Unlock()
	running := map[string]bool{}
	for _, id := range waitDone(ctx, t, c, ids, drain) {
		running[id] = true
	}
	ends := newTally(drain, protocol.Outcome.Succeeded)
	var calmLat, heldLat, newLat []time.Duration // calm; in flight when the disk filled; submitted after it was freed
	acceptedFull := 0                            // accepted between the fill and the freeing
	firstNew := time.Duration(-1)
	for _, a := range accepted {
		_, end := ends.count(ctx, t, c, a.id, running[a.id])
		if end == nil {
			continue
		}
		if a.accepted.After(filled) && a.accepted.Before(freed) {
			acceptedFull++
		}
		switch {
		case a.accepted.Before(filled) && end.Time.Before(filled):
			calmLat = append(calmLat, end.Time.Sub(a.submitted))
		case a.accepted.Before(filled) && end.Time.After(filled):
			heldLat = append(heldLat, end.Time.Sub(a.submitted))
		case a.submitted.After(freed):
			newLat = append(newLat, end.Time.Sub(a.submitted))
			if d := end.Time.Sub(freed); firstNew < 0 || d < firstNew {
				firstNew = d
			}
		}
	}
	dups, reruns := effects(t, effectsLog)
	dead := deadLetters(ctx, c)
	upLog, _ := os.ReadFile(up.log)
	nospace := strings.Count(string(upLog), "no space left on device")

	mu.Lock()
	defer mu.Unlock()
	var report strings.Builder
	fmt.Fprintf(&report, "tmpfs %d MiB, reserve %d MiB; calm %s, disk full %s, then %s more arrivals\n", diskMiB, reserveMiB, calmFor, fullFor, afterFor)
	fmt.Fprintf(&report, "arrivals %.1f/s over HTTP (a 503 sent again each second with the same session id), tool wait %.1f s\n", rate, toolWait)
	ends.write(&report, len(accepted), dups, reruns)
	var codes []string
	for k, n := range refused {
		codes = append(codes, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(codes)
	fmt.Fprintf(&report, "refused answers (each retry counted): %s\n", strings.Join(codes, ", "))
	firstRefusal := "never"
	if !firstFull.IsZero() {
		firstRefusal = firstFull.Sub(filled).Round(100 * time.Millisecond).String()
	}
	fmt.Fprintf(&report, "after the fill: health full after %s, first 503 storage_full after %s; \"no space left on device\" lines in the log: %d; dead letters %d\n",
		fullNoted.Round(100*time.Millisecond), firstRefusal, nospace, dead)
	first := "never"
	if firstNew >= 0 {
		first = firstNew.Round(100 * time.Millisecond).String()
	}
	fmt.Fprintf(&report, "after space was freed: health ok after %s, first new session succeeded after %s\n", okAfter.Round(100*time.Millisecond), first)
	fmt.Fprintf(&report, "calm: %d sessions, p50 %s, p99 %s; accepted while the disk was full: %d\n", len(calmLat), pct(calmLat, 50), pct(calmLat, 99), acceptedFull)
	fmt.Fprintf(&report, "sessions in flight when the disk filled: %d, p50 %s, max %s from submit to success\n", len(heldLat), pct(heldLat, 50), pct(heldLat, 100))
	fmt.Fprintf(&report, "sessions submitted after space was freed: %d, p50 %s, p99 %s\n", len(newLat), pct(newLat, 50), pct(newLat, 99))
	t.Log("\n" + report.String())
	rejected := 0
	for k, n := range refused {
		if strings.HasPrefix(k, "422") {
			rejected += n
		}
	}
	if ends.lost != 0 || ends.failed != 0 || dups != 0 || rejected != 0 || nospace == 0 || okAfter < 0 || !saidFull {
		t.Fatalf("%d sessions lost, %d failed, %d duplicated side effects, %d submits refused as rejected, %d server lines about the full disk, storage back after %s",
			ends.lost, ends.failed, dups, rejected, nospace, okAfter)
	}
}
