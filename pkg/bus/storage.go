package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// How a full store shows, and what the mesh does about it.
//
// JetStream answers a publish it cannot store for want of room under a limit with an API error
// whose code says so (storageFullCodes): an account's or the server's store limit, or a work
// queue's own max_bytes or max_msgs under discard-new. A disk that fills up is different: the
// server's file store meets "no space left on device", keeps that write error for the stream
// (every later write to it fails the same way, even once space is freed, until the stream is
// loaded again) and answers the publisher nothing, so the publish times out. Only the server
// sees that state: its /healthz lists each stream's write error. For the embedded server the
// process that runs it watches it (StorageWatch), answers every role's question on
// Names.Storage(), and restarts JetStream in place once space is back, which loads every stream
// again with its write error cleared and nothing lost. A server of the operator's own (a
// cluster) says it in its /healthz; a clustered node that runs out of space disables its
// JetStream and needs a restart (docs/architecture.md).

// JetStream API error codes (nats-server's errors.json) that mean the store is full.
const (
	jsErrAccountResourcesExceeded = 10002 // JSAccountResourcesExceededErr: the account's store limit
	jsErrInsufficientResources    = 10023 // JSInsufficientResourcesErr: the server's store limit
	jsErrStorageResourcesExceeded = 10047 // JSStorageResourcesExceededErr: no storage left to reserve
	jsErrStreamStoreFailed        = 10077 // JSStreamStoreFailedF: the stream's own max_bytes/max_msgs under discard-new
)

var storageFullCodes = []jetstream.ErrorCode{jsErrAccountResourcesExceeded, jsErrInsufficientResources,
	jsErrStorageResourcesExceeded, jsErrStreamStoreFailed}

// IsStorageFull reports whether err is JetStream refusing a write for want of storage, or a
// protocol error with code storage_full.
func IsStorageFull(err error) bool {
	if err == nil {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && slices.Contains(storageFullCodes, api.ErrorCode) {
		return true
	}
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Code == protocol.CodeStorageFull
}

// Storage asks the mesh how its storage stands (Names.Storage()). The answer is cached for
// storageFresh; fresh skips the cache (after a write failed, to tell why). A mesh nobody
// answers for (its server is not embedded), or whose answer does not come within a second,
// gets the zero reply, which accepts work: such a mesh learns of a full store from the
// server's own error codes (IsStorageFull).
func (c *Conn) Storage(ctx context.Context, names protocol.Names, fresh bool) protocol.StorageReply {
	c.storageMu.Lock()
	defer c.storageMu.Unlock()
	limit := storageFresh
	if fresh {
		limit = storageFreshest // callers that failed together share one question
	}
	if time.Since(c.storageAt) < limit {
		return c.storage
	}
	var rep protocol.StorageReply
	data, err := protocol.Marshal(&protocol.StorageRequest{})
	var denied atomic.Bool
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		// An identity the server's permissions do not let ask (a NATS configuration older than
		// the matrix) is refused without an answer: stop waiting at once, and ask less often.
		stop := onDenied(c.NC, names.Storage(), func(error) { denied.Store(true); cancel() })
		var msg *nats.Msg
		msg, err = c.NC.RequestWithContext(rctx, names.Storage(), data)
		stop()
		cancel()
		if err == nil {
			err = protocol.Unmarshal(msg.Data, &rep)
		}
	}
	if err != nil {
		rep = protocol.StorageReply{}
	}
	c.storage, c.storageAt = rep, time.Now()
	if denied.Load() {
		c.storageAt = c.storageAt.Add(storageDenied)
	}
	return rep
}

// storageDenied is how much longer a refused question's answer is kept.
const storageDenied = time.Minute

// How long a Conn keeps an answer of Storage, and a fresh one.
const (
	storageFresh    = time.Second
	storageFreshest = 200 * time.Millisecond
)

// StorageFullError is the error a role answers with while the mesh cannot take new work for want
// of storage: code storage_full (HTTP 503, CLI exit 75), with what is wrong and what to do.
func StorageFullError(rep protocol.StorageReply) error {
	return protocol.Errorf(protocol.CodeStorageFull, "the mesh's storage is %s: %s", rep.State, rep.Reason)
}

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
	e       *Embedded
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
func (e *Embedded) WatchStorage(ctx context.Context, nc *nats.Conn, names protocol.Names, o StorageOptions) (*StorageWatch, error) {
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
		if data, err := protocol.Marshal(&rep); err == nil {
			_ = m.Respond(data)
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
