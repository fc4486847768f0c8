package bus

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

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
