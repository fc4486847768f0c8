package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	if errors.Is(err, errNoDirect) {
		return readConsumer(ctx, js, stream, filter, from, fn)
	}
	return err
}

// errNoDirect: nothing answers direct gets on the stream (allow_direct is off).
var errNoDirect = errors.New("stream does not allow direct gets")

// directRequest is JetStream's batched direct-get request (server 2.11+).
type directRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
	Batch     int        `json:"batch,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

// readDirect reads with batched direct gets. It subscribes with a channel sized to one batch
// (the server sends at most a batch and its end marker per request) rather than through a
// synchronous subscription, whose default 64k-slot channel would cost half a megabyte per read.
func readDirect(ctx context.Context, js jetstream.JetStream, stream, filter string, from ReadFrom, fn func(*jetstream.RawStreamMsg) bool) error {
	nc := js.Conn()
	subject := apiPrefix(js.Options()) + "DIRECT.GET." + stream
	req := directRequest{Seq: from.Seq, NextFor: filter, Batch: readBatch}
	if req.Seq == 0 {
		if from.Time.IsZero() {
			req.Seq = 1
		} else {
			t := from.Time
			req.StartTime = &t
		}
	}
	for {
		body, err := json.Marshal(req)
		if err != nil {
			return err
		}
		n, last, more, stopped, err := directBatch(ctx, nc, subject, body, fn)
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		if stopped || n == 0 || !more {
			return nil
		}
		// More than one batch, or the batch was cut short by the server's byte limit: go on
		// after the last message seen.
		req.Seq, req.StartTime = last+1, nil
	}
}

// directBatch sends one request and hands its messages to fn. more reports that the server
// said messages are pending past this batch.
func directBatch(ctx context.Context, nc *nats.Conn, subject string, body []byte, fn func(*jetstream.RawStreamMsg) bool) (n int, last uint64, more, stopped bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, readRequestTimeout)
	defer cancel()
	ch := make(chan *nats.Msg, readBatch+2)
	inbox := nc.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return 0, 0, false, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return 0, 0, false, false, err
	}
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-rctx.Done():
			return n, last, false, false, rctx.Err()
		}
		if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
			switch status {
			case "204": // end of batch
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return n, last, pending > 0, false, nil
			case "404":
				return n, last, false, false, nil
			case "503":
				return n, last, false, false, errNoDirect
			}
			return n, last, false, false, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return n, last, false, false, fmt.Errorf("direct get: bad sequence header %q", m.Header.Get(jetstream.SequenceHeader))
		}
		ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		n, last = n+1, seq
		if !fn(&jetstream.RawStreamMsg{Subject: m.Header.Get(jetstream.SubjectHeader), Sequence: seq, Header: m.Header, Data: m.Data, Time: ts}) {
			return n, last, false, true, nil
		}
	}
}

// apiPrefix is the JetStream API prefix of js (a domain or a custom prefix changes it).
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return "$JS.API."
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
