package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// CreateMissing creates every stream, bucket and object store of the mesh that does not exist
// yet, and leaves the existing ones exactly as they are. It needs only the permission to create
// (the gateway's), not the admin's permission to change or delete: a role that may provision a
// fresh mesh cannot reconfigure, say, the memory bucket of a running one.
func CreateMissing(ctx context.Context, js jetstream.JetStream, n protocol.Names, l Limits) error {
	return Provision(ctx, createOnly{js}, n, l)
}

// createOnly turns Provision's create-or-update calls into create-if-missing.
type createOnly struct{ jetstream.JetStream }

func (c createOnly) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if s, err := c.Stream(ctx, cfg.Name); err == nil {
		return s, nil
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	s, err := c.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return c.Stream(ctx, cfg.Name) // another process created it meanwhile
	}
	return s, err
}

func (c createOnly) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if kv, err := c.KeyValue(ctx, cfg.Bucket); err == nil {
		return kv, nil
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	kv, err := c.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return c.KeyValue(ctx, cfg.Bucket)
	}
	return kv, err
}

func (c createOnly) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	if os, err := c.ObjectStore(ctx, cfg.Bucket); err == nil {
		return os, nil
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	os, err := c.CreateObjectStore(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return c.ObjectStore(ctx, cfg.Bucket)
	}
	return os, err
}

// WaitStreams waits until every named JetStream stream (KV_x and OBJ_x for buckets) exists, for
// at most maxWait: roles that may not create them wait for the gateway or `skein up` to.
func WaitStreams(ctx context.Context, js jetstream.JetStream, streams []string, maxWait time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	said := false
	for _, name := range streams {
		for {
			_, err := js.Stream(ctx, name)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrStreamNotFound) && ctx.Err() == nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("stream %s does not exist after %s: start the gateway (or `skein up`, or `skein` with the admin credentials), which creates the mesh's streams", name, maxWait)
			}
			if !said && log != nil {
				log.Info("waiting for the mesh's streams (the gateway creates them)", "missing", name)
				said = true
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	return nil
}
