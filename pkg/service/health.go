package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// The paths a role's health listener (--health ADDR) answers on, for orchestrators' probes.
const (
	// HealthLivePath answers 200 while the process can still do its work: it fails only once its
	// NATS connection is closed for good, which no waiting repairs (restart the process).
	HealthLivePath = "/livez"
	// HealthReadyPath answers 200 while the role takes work: connected to NATS and started
	// (its consumers or endpoints in place); 503 while it connects, waits for the streams it
	// uses, or has lost the server and is reconnecting.
	HealthReadyPath = "/readyz"
)

// Health is what a role's health listener reports. The zero value is not usable: make one with
// NewHealth, give it the connection once there is one and mark it ready when the role serves.
type Health struct {
	role  string
	conn  atomic.Pointer[nats.Conn]
	ready atomic.Bool
}

// NewHealth is the health of a process running role, not connected and not ready yet.
func NewHealth(role string) *Health { return &Health{role: role} }

// SetConn is the connection whose state the listener reports.
func (h *Health) SetConn(nc *nats.Conn) { h.conn.Store(nc) }

// SetReady marks the role started: it takes work from now on.
func (h *Health) SetReady() { h.ready.Store(true) }

// HealthReport is the JSON body of both paths.
type HealthReport struct {
	Role string `json:"role"`
	// NATS is the connection's state: connecting (before the first connection), connected,
	// reconnecting, or closed.
	NATS string `json:"nats"`
	// Started is true once the role has its consumers or endpoints in place.
	Started bool `json:"started"`
	Live    bool `json:"live"`
	Ready   bool `json:"ready"`
}

// Report is the health now.
func (h *Health) Report() HealthReport {
	r := HealthReport{Role: h.role, NATS: "connecting", Started: h.ready.Load(), Live: true}
	if nc := h.conn.Load(); nc != nil {
		switch st := nc.Status(); st {
		case nats.CONNECTED:
			r.NATS = "connected"
		case nats.CLOSED:
			r.NATS, r.Live = "closed", false
		case nats.RECONNECTING, nats.DISCONNECTED:
			r.NATS = "reconnecting"
		default: // CONNECTING, DRAINING_*: not taking work now, not broken either
			r.NATS = strings.ToLower(st.String())
		}
	}
	r.Ready = r.NATS == "connected" && r.Started
	return r
}

// Handler serves HealthLivePath and HealthReadyPath (GET or HEAD), each 200 or 503 with the
// report as JSON. It reads only in-memory state, so a probe costs no NATS round trip.
func (h *Health) Handler() http.Handler {
	mux := http.NewServeMux()
	serve := func(ok func(HealthReport) bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			r := h.Report()
			status := http.StatusOK
			if !ok(r) {
				status = http.StatusServiceUnavailable
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(r)
		}
	}
	mux.Handle("GET "+HealthLivePath, serve(func(r HealthReport) bool { return r.Live }))
	mux.Handle("GET "+HealthReadyPath, serve(func(r HealthReport) bool { return r.Ready }))
	return mux
}

// ServeHealth serves h on addr until ctx ends and returns the address it listens on. It is off
// unless an operator asks for it with --health; an orchestrator probes it over the pod network,
// and it tells nothing but the role, the NATS state and readiness. Requests are bounded in size
// and time like the HTTP API's.
func ServeHealth(ctx context.Context, addr string, h *Health, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--health %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 8 << 10}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Warn("health listener stopped", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	if log != nil {
		log.Info("health endpoints up", "live", "http://"+ln.Addr().String()+HealthLivePath,
			"ready", "http://"+ln.Addr().String()+HealthReadyPath)
	}
	return ln.Addr().String(), nil
}
