package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// maxDeliveriesAdvisory is the part of the JetStream advisory a dead letter needs.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
	// Reason is set on a terminated message's advisory.
	Reason string `json:"reason"`
}

// Dead-letter headers, so an operator sees where a message came from.
const (
	HeaderDLQSubject    = "Skein-Dlq-Subject"
	HeaderDLQStream     = "Skein-Dlq-Stream"
	HeaderDLQConsumer   = "Skein-Dlq-Consumer"
	HeaderDLQSequence   = "Skein-Dlq-Sequence"
	HeaderDLQDeliveries = "Skein-Dlq-Deliveries"
)

// StartDLQ copies every message that exhausts a consumer's deliveries, or that a consumer
// terminates, on one of the mesh's streams into the DLQ stream (subject names.DLQ(stream)), with headers naming its origin, until
// the returned stop is called. The mesh's own consumers leave max_deliver unlimited (their
// worker counts deliveries and writes the dead letter itself, see ConsumerSpec.MaxDeliveries), so
// the max-deliveries advisory comes from consumers an operator added. It subscribes in a queue group, so several gateways copy each dead
// letter once.
func StartDLQ(c *Conn, names protocol.Names, log *slog.Logger) (stop func() error, err error) {
	ctx := context.Background()
	ours := map[string]bool{}
	for _, s := range []string{protocol.StreamTasks, protocol.StreamWork, protocol.StreamResults, protocol.StreamTrace} {
		ours[names.Stream(s)] = true
	}
	copyDead := func(what string) nats.MsgHandler {
		return func(m *nats.Msg) {
			var adv maxDeliveriesAdvisory
			if err := json.Unmarshal(m.Data, &adv); err != nil || !ours[adv.Stream] {
				return
			}
			if adv.Reason == "" {
				adv.Reason = what
			}
			dup, err := deadLetter(ctx, c, names, adv)
			if err != nil {
				// A terminated message of a work queue is gone already; the worker that
				// terminated it wrote the dead letter first.
				log.Debug("dead letter not copied", "stream", adv.Stream, "seq", adv.StreamSeq, "why", what, "err", err)
				return
			}
			if dup {
				return // the consumer's worker wrote it already
			}
			log.Warn("message moved to the DLQ", "stream", adv.Stream, "consumer", adv.Consumer, "seq", adv.StreamSeq,
				"deliveries", adv.Deliveries, "reason", adv.Reason)
		}
	}
	sub, err := c.NC.QueueSubscribe(names.MaxDeliveriesAdvisory(), names.NS+"-dlq", copyDead("exhausted its deliveries"))
	if err != nil {
		return nil, fmt.Errorf("dlq: subscribe to advisories: %w", err)
	}
	term, err := c.NC.QueueSubscribe(names.MsgTerminatedAdvisory(), names.NS+"-dlq", copyDead("terminated by its consumer"))
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("dlq: subscribe to advisories: %w", err)
	}
	if err := c.NC.Flush(); err != nil {
		_ = sub.Unsubscribe()
		_ = term.Unsubscribe()
		return nil, fmt.Errorf("dlq: subscribe to advisories: %w", err)
	}
	return func() error { return errors.Join(sub.Unsubscribe(), term.Unsubscribe()) }, nil
}

func deadLetter(ctx context.Context, c *Conn, names protocol.Names, adv maxDeliveriesAdvisory) (dup bool, err error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := c.JS.Stream(gctx, adv.Stream)
	if err != nil {
		return false, err
	}
	raw, err := s.GetMsg(gctx, adv.StreamSeq)
	if err != nil {
		return false, fmt.Errorf("read message %d: %w", adv.StreamSeq, err)
	}
	msg := nats.NewMsg(names.DLQ(adv.Stream))
	msg.Data = raw.Data
	msg.Header.Set(HeaderDLQSubject, raw.Subject)
	msg.Header.Set(HeaderDLQStream, adv.Stream)
	msg.Header.Set(HeaderDLQConsumer, adv.Consumer)
	msg.Header.Set(HeaderDLQSequence, strconv.FormatUint(adv.StreamSeq, 10))
	msg.Header.Set(HeaderDLQDeliveries, strconv.FormatUint(adv.Deliveries, 10))
	msg.Header.Set(HeaderDLQReason, adv.Reason)
	// The Msg-Id makes a repeated advisory (or a second copier) harmless.
	msg.Header.Set(nats.MsgIdHdr, adv.Stream+"/"+adv.Consumer+"/"+strconv.FormatUint(adv.StreamSeq, 10))
	ack, err := c.JS.PublishMsg(gctx, msg)
	if err != nil {
		return false, err
	}
	return ack.Duplicate, nil
}

// HeaderDLQReason says why a message was dead-lettered.
const HeaderDLQReason = "Skein-Dlq-Reason"

// DeadLetter copies a message taken from a consumer into the DLQ with its origin and reason.
// Its Msg-Id is the one the advisory copier uses, so a message is dead-lettered once.
func DeadLetter(ctx context.Context, js jetstream.JetStream, names protocol.Names, m jetstream.Msg, reason string) error {
	meta, err := m.Metadata()
	if err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	msg := nats.NewMsg(names.DLQ(meta.Stream))
	msg.Data = m.Data()
	msg.Header.Set(HeaderDLQSubject, m.Subject())
	msg.Header.Set(HeaderDLQStream, meta.Stream)
	msg.Header.Set(HeaderDLQConsumer, meta.Consumer)
	msg.Header.Set(HeaderDLQSequence, strconv.FormatUint(meta.Sequence.Stream, 10))
	msg.Header.Set(HeaderDLQDeliveries, strconv.FormatUint(meta.NumDelivered, 10))
	if len(reason) > 1024 {
		reason = reason[:1024] + "…"
	}
	msg.Header.Set(HeaderDLQReason, reason)
	msg.Header.Set(nats.MsgIdHdr, meta.Stream+"/"+meta.Consumer+"/"+strconv.FormatUint(meta.Sequence.Stream, 10))
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(pctx, msg); err != nil {
		return fmt.Errorf("dead letter to %s: %w", msg.Subject, err)
	}
	return nil
}
