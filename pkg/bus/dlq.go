package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// maxDeliveriesAdvisory is the part of the JetStream advisory a dead letter needs.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// Dead-letter headers, so an operator sees where a message came from.
const (
	HeaderDLQSubject    = "Skein-Dlq-Subject"
	HeaderDLQStream     = "Skein-Dlq-Stream"
	HeaderDLQConsumer   = "Skein-Dlq-Consumer"
	HeaderDLQSequence   = "Skein-Dlq-Sequence"
	HeaderDLQDeliveries = "Skein-Dlq-Deliveries"
)

// StartDLQ copies every message that exhausts a consumer's deliveries on one of the mesh's
// streams into the DLQ stream (subject names.DLQ(stream)), with headers naming its origin, until
// the returned stop is called. It subscribes in a queue group, so several gateways copy each dead
// letter once.
func StartDLQ(c *Conn, names protocol.Names, log *slog.Logger) (stop func() error, err error) {
	ctx := context.Background()
	ours := map[string]bool{}
	for _, s := range []string{protocol.StreamTasks, protocol.StreamWork, protocol.StreamResults, protocol.StreamTrace} {
		ours[names.Stream(s)] = true
	}
	sub, err := c.NC.QueueSubscribe(names.MaxDeliveriesAdvisory(), names.NS+"-dlq", func(m *nats.Msg) {
		var adv maxDeliveriesAdvisory
		if err := json.Unmarshal(m.Data, &adv); err != nil || !ours[adv.Stream] {
			return
		}
		if err := deadLetter(ctx, c, names, adv); err != nil {
			log.Error("dead letter not recorded", "stream", adv.Stream, "seq", adv.StreamSeq, "err", err)
			return
		}
		log.Warn("message moved to the DLQ after exhausting its deliveries", "stream", adv.Stream,
			"consumer", adv.Consumer, "seq", adv.StreamSeq, "deliveries", adv.Deliveries)
	})
	if err != nil {
		return nil, fmt.Errorf("dlq: subscribe to advisories: %w", err)
	}
	if err := c.NC.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("dlq: subscribe to advisories: %w", err)
	}
	return sub.Unsubscribe, nil
}

func deadLetter(ctx context.Context, c *Conn, names protocol.Names, adv maxDeliveriesAdvisory) error {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := c.JS.Stream(gctx, adv.Stream)
	if err != nil {
		return err
	}
	raw, err := s.GetMsg(gctx, adv.StreamSeq)
	if err != nil {
		return fmt.Errorf("read message %d: %w", adv.StreamSeq, err)
	}
	msg := nats.NewMsg(names.DLQ(adv.Stream))
	msg.Data = raw.Data
	msg.Header.Set(HeaderDLQSubject, raw.Subject)
	msg.Header.Set(HeaderDLQStream, adv.Stream)
	msg.Header.Set(HeaderDLQConsumer, adv.Consumer)
	msg.Header.Set(HeaderDLQSequence, strconv.FormatUint(adv.StreamSeq, 10))
	msg.Header.Set(HeaderDLQDeliveries, strconv.FormatUint(adv.Deliveries, 10))
	// The Msg-Id makes a repeated advisory (or a second copier) harmless.
	msg.Header.Set(nats.MsgIdHdr, adv.Stream+"/"+adv.Consumer+"/"+strconv.FormatUint(adv.StreamSeq, 10))
	_, err = c.JS.PublishMsg(gctx, msg)
	return err
}
