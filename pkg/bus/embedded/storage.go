package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The embedded server's side of a full store (see pkg/bus/storage.go for how roles learn of it):
// the process that runs the server watches its store and answers Names.Storage() for every role.

// StorageOptions tune a StorageWatch.
type StorageOptions struct {
	// Reserve is the free space under which new sessions are refused (0: DefaultStorageReserve
	// of the store's filesystem).
	Reserve int64
	// Interval is how often the store is looked at (0: 1 s).
	Interval time.Duration
	Logger   *slog.Logger
}

// DefaultStorageReserve is 2% of a filesystem of total bytes, at least 8 MiB and at most 1 GiB:
// room for the sessions already accepted to finish once new ones are refused.
func DefaultStorageReserve(total int64) int64 {
	return min(max(total/50, 8<<20), 1<<30)
}

// StorageWatch watches an embedded server's JetStream store: its free space against the reserve
// and the write errors the server reports per stream. It logs every change of state, answers
// Names.Storage() with it, and restarts JetStream in place when streams have write errors and
// the free space is back above the reserve.
type StorageWatch struct {
	e       *Server
	reserve int64
	log     *slog.Logger

	mu    sync.Mutex
	state protocol.StorageReply
	// next is the earliest time of the next restart; gap grows while restarts do not help.
	next time.Time
	gap  time.Duration
}

// Restart gaps: a restart that leaves write errors behind is tried again after a longer wait.
const (
	minRestartGap = 2 * time.Second
	maxRestartGap = 2 * time.Minute
)

// WatchStorage starts watching the server's store until ctx ends, serving the state on
// names.Storage() through nc (a connection allowed to serve it: the admin's).
func (e *Server) WatchStorage(ctx context.Context, nc *nats.Conn, names protocol.Names, o StorageOptions) (*StorageWatch, error) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	_, total, err := diskSpace(e.dir)
	if err != nil {
		return nil, fmt.Errorf("storage watch: %w", err)
	}
	if o.Reserve <= 0 {
		o.Reserve = DefaultStorageReserve(total)
	}
	w := &StorageWatch{e: e, reserve: o.Reserve, log: o.Logger, gap: minRestartGap}
	w.check()
	sub, err := nc.Subscribe(names.Storage(), func(m *nats.Msg) {
		rep := w.State()
		// An empty request is a question too (`nats req <subject> ''`); anything else must read.
		var req protocol.StorageRequest
		if err := protocol.UnmarshalChecked(m.Data, &req); len(m.Data) > 0 && err != nil {
			rep = protocol.StorageReply{}
			rep.Fail(fmt.Errorf("storage request: %w", err))
		}
		if data, err := protocol.Marshal(&rep); err == nil {
			_ = nc.PublishMsg(bus.ReplyMsg(m.Reply, data, &rep))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("storage watch: serve %s: %w", names.Storage(), err)
	}
	go func() {
		defer func() { _ = sub.Unsubscribe() }()
		t := time.NewTicker(o.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.check()
			}
		}
	}()
	return w, nil
}

// State is the store's state as last seen.
func (w *StorageWatch) State() protocol.StorageReply {
	w.mu.Lock()
	defer w.mu.Unlock()
	rep := w.state
	rep.Streams = slices.Clone(rep.Streams)
	return rep
}

// check looks at the store once, restarts JetStream when that clears write errors, and records
// (and logs) the state.
func (w *StorageWatch) check() {
	now := time.Now()
	rep := w.look()
	w.mu.Lock()
	restart := rep.State == protocol.StorageFull && rep.FreeBytes >= w.reserve && !now.Before(w.next)
	if restart {
		w.next = now.Add(w.gap)
		w.gap = min(2*w.gap, maxRestartGap)
	}
	w.mu.Unlock()
	if restart {
		broken := strings.Join(rep.Streams, ", ")
		if err := w.e.restartJetStream(); err != nil {
			w.log.Error("storage: space is back but JetStream did not restart; restart this process", "err", err, "streams", broken)
		} else {
			w.log.Warn("storage: space is back; JetStream restarted in place to clear its write errors", "streams", broken,
				"free_mib", rep.FreeBytes>>20)
			rep = w.look()
			rep.Restarts++
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rep.Restarts += w.state.Restarts
	if rep.State == protocol.StorageOK {
		w.gap = minRestartGap
	}
	if rep.State == w.state.State {
		rep.Since = w.state.Since
		w.state = rep
		return
	}
	rep.Since = now
	w.state = rep
	switch rep.State {
	case protocol.StorageOK:
		w.log.Info("storage: JetStream writes again; new sessions are accepted", "free_mib", rep.FreeBytes>>20)
	case protocol.StorageLow:
		w.log.Warn("storage low: new sessions are refused (storage_full) while work already accepted finishes", "reason", rep.Reason)
	case protocol.StorageFull:
		w.log.Error("storage full: JetStream cannot write; new sessions are refused and work in flight waits", "reason", rep.Reason)
	}
}

// look reads the free space and the server's health.
func (w *StorageWatch) look() protocol.StorageReply {
	rep := protocol.StorageReply{State: protocol.StorageOK, ReserveBytes: w.reserve}
	free, _, err := diskSpace(w.e.dir)
	if err != nil {
		rep.FreeBytes = -1
	} else {
		rep.FreeBytes = free
	}
	var problems []string
	h := w.e.Server.Healthz(&server.HealthzOptions{Details: true})
	for _, he := range h.Errors {
		switch he.Type {
		case server.HealthzErrorStream:
			rep.Streams = append(rep.Streams, he.Stream)
			problems = append(problems, he.Error)
		case server.HealthzErrorJetStream:
			problems = append(problems, he.Error)
		}
	}
	where := fmt.Sprintf("%d MiB free under %s (reserve %d MiB, mesh.storage_reserve)", max(rep.FreeBytes, 0)>>20, w.e.dir, w.reserve>>20)
	switch {
	case len(problems) > 0:
		rep.State = protocol.StorageFull
		rep.Reason = fmt.Sprintf("%s; %s: free space there and the mesh resumes by itself once more than the reserve is free",
			strings.Join(problems, "; "), where)
	case err != nil:
		rep.State = protocol.StorageFull
		rep.Reason = fmt.Sprintf("cannot read the free space under %s: %v", w.e.dir, err)
	case free < w.reserve:
		rep.State = protocol.StorageLow
		rep.Reason = where + ": free space there; work already accepted goes on meanwhile"
	}
	return rep
}

// diskSpace is the free space (for an unprivileged writer) and the size of dir's filesystem.
func diskSpace(dir string) (free, total int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}
