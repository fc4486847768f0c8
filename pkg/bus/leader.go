package bus

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NoLeader reports whether err means that no server answered for the stream: it has no leader
// (one of the cluster's servers died and the stream elects another, which takes seconds) or is
// not there. Nothing was stored then, so a write that failed this way can be sent again.
func NoLeader(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// WhileNoLeader runs op, and again while it fails with NoLeader, waiting 50 ms and doubling to
// 1 s between tries, until ctx ends. It returns op's last error; any other error ends it at once.
func WhileNoLeader(ctx context.Context, op func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.Multiplier = 2
	b.MaxInterval = time.Second
	b.MaxElapsedTime = 0 // ctx bounds it
	var last error
	err := backoff.Retry(func() error {
		last = op()
		if last != nil && !NoLeader(last) {
			return backoff.Permanent(last)
		}
		return last
	}, backoff.WithContext(b, ctx))
	if err != nil && last != nil {
		return last // what failed, rather than the context's end
	}
	return err
}
