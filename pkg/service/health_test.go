package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
)

// The health listener follows a role's life on a real server: live from the start, ready only
// while connected and started, not ready while the server is gone, and not live once the
// connection is closed for good.
func TestHealthFollowsTheConnectionAndTheRole(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := NewHealth("executor")
	addr, err := ServeHealth(ctx, "127.0.0.1:0", h, nil)
	if err != nil {
		t.Fatal(err)
	}
	probe := func(path string) (int, HealthReport) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r HealthReport
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.StatusCode, r
	}
	expect := func(path string, status int, nats string, ready bool) func() error {
		return func() error {
			got, r := probe(path)
			if got != status || r.NATS != nats || r.Ready != ready || r.Role != "executor" {
				return fmt.Errorf("%s: %d %+v, want %d nats=%s ready=%v", path, got, r, status, nats, ready)
			}
			return nil
		}
	}
	check := func(what string, fn func() error) {
		t.Helper()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	check("before connecting", expect(HealthLivePath, 200, "connecting", false))
	check("before connecting", expect(HealthReadyPath, 503, "connecting", false))

	conn, err := bus.Connect(ctx, m.URL, "health", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h.SetConn(conn.NC)
	check("connected, role not started", expect(HealthReadyPath, 503, "connected", false))
	h.SetReady()
	check("connected and started", expect(HealthReadyPath, 200, "connected", true))

	m.Server.Shutdown()
	poll.Eventually(t, 10*time.Second, "not ready once the server is gone", expect(HealthReadyPath, 503, "reconnecting", false))
	check("reconnecting", expect(HealthLivePath, 200, "reconnecting", false))

	conn.Close()
	check("closed", expect(HealthLivePath, 503, "closed", false))

	resp, err := http.Post("http://"+addr+HealthReadyPath, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %s: %d, want 405", HealthReadyPath, resp.StatusCode)
	}
}
