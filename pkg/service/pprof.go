package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// ServePprof serves the runtime profiles (/debug/pprof/...) on addr until ctx ends. It is off
// unless an operator asks for it with --pprof, and it listens only where told: profiles show
// code paths and data sizes, so bind it to loopback or a private network.
func ServePprof(ctx context.Context, addr string, log *slog.Logger) (string, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--pprof %s: %w", addr, err)
	}
	// A CPU profile runs for its ?seconds=, so the write timeout leaves room for long ones.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 5 * time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Warn("pprof server stopped", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	if log != nil {
		log.Info("pprof endpoints up", "addr", "http://"+ln.Addr().String()+"/debug/pprof/")
	}
	return ln.Addr().String(), nil
}
