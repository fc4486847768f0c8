package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// ReadFrom is where ReadStream starts: a stream sequence, else the first message stored at or
// after a time, else the stream's first message.
type ReadFrom struct {
	Seq  uint64
	Time time.Time
}

// readBatch is how many messages one direct-get request asks for.
const readBatch = 256

// readRequestTimeout bounds one batch request when ctx has no earlier deadline.
const readRequestTimeout = 10 * time.Second

// ReadStream calls fn, in stream order, with every message of stream whose subject matches
// filter (wildcards allowed), from `from` up to the last message stored when it reaches it;
// fn returns false to stop early.
//
// It reads with batched direct gets, which leave nothing on the server, so a reader per session
// costs no consumer. On a stream without allow_direct it falls back to an ephemeral consumer
// that it deletes before returning. Either way every request is bounded by ctx.
func ReadStream(ctx context.Context, js jetstream.JetStream, stream, filter string, from ReadFrom, fn func(*jetstream.RawStreamMsg) bool) error {
	err := readDirect(ctx, js, stream, filter, from, fn)
	// No responder on the direct-get subject: the stream does not allow direct gets.
	if errors.Is(err, jetstreamext.ErrBatchUnsupported) || errors.Is(err, nats.ErrNoResponders) {
		return readConsumer(ctx, js, stream, filter, from, fn)
	}
	return err
}

func readDirect(ctx context.Context, js jetstream.JetStream, stream, filter string, from ReadFrom, fn func(*jetstream.RawStreamMsg) bool) error {
	seq, start := from.Seq, from.Time
	for {
		opts := []jetstreamext.GetBatchOpt{jetstreamext.GetBatchSubject(filter)}
		switch {
		case seq > 0:
			opts = append(opts, jetstreamext.GetBatchSeq(seq))
		case !start.IsZero():
			opts = append(opts, jetstreamext.GetBatchStartTime(start))
		}
		rctx, cancel := context.WithTimeout(ctx, readRequestTimeout)
		msgs, err := jetstreamext.GetBatch(rctx, js, stream, readBatch, opts...)
		if err != nil {
			cancel()
			return fmt.Errorf("read %s: %w", stream, err)
		}
		n, pending := 0, uint64(0)
		var last uint64
		stopped := false
		for m, err := range msgs {
			if err != nil {
				if errors.Is(err, jetstreamext.ErrNoMessages) {
					break
				}
				cancel()
				return fmt.Errorf("read %s: %w", stream, err)
			}
			n++
			last = m.Sequence
			pending, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			if !fn(m) {
				stopped = true
				break
			}
		}
		cancel()
		if stopped || n == 0 || pending == 0 {
			return ctx.Err()
		}
		// More than one batch, or the batch was cut short (max bytes, deadline): go on after the
		// last message seen.
		seq = last + 1
	}
}

// readConsumer is the fallback for a stream that does not allow direct gets.
func readConsumer(ctx context.Context, js jetstream.JetStream, stream, filter string, from ReadFrom, fn func(*jetstream.RawStreamMsg) bool) error {
	cfg := jetstream.ConsumerConfig{
		FilterSubject: filter, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true,
		// Deleted below; the threshold only covers a reader that dies mid-read.
		InactiveThreshold: time.Minute,
	}
	switch {
	case from.Seq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from.Seq
	case !from.Time.IsZero():
		t := from.Time
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	c, err := js.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	name := c.CachedInfo().Name
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, stream, name)
	}()
	pending := c.CachedInfo().NumPending
	for pending > 0 {
		wait := readRequestTimeout
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(dl), time.Millisecond))
		}
		batch, err := c.Fetch(int(min(pending, readBatch)), jetstream.FetchMaxWait(wait))
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				continue
			}
			if !fn(&jetstream.RawStreamMsg{Subject: msg.Subject(), Sequence: meta.Sequence.Stream, Header: msg.Headers(),
				Data: msg.Data(), Time: meta.Timestamp}) {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		if n == 0 {
			return ctx.Err()
		}
		pending -= min(pending, uint64(n))
	}
	return nil
}
