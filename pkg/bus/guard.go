package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// The second line of defence against a protocol line the server refuses. Every identifier is
// checked where it enters the mesh (protocol.ID); should one slip through, a NATS server closes
// the connection of a client that sends a line over its max_control_line, and nats.go does not
// reconnect it: one request would leave the role half dead. nats.go checks a message's payload
// and headers against the server's max_payload itself, but not the length of its subject
// (nats-io/nats.go#1572), so the connection's JetStream context checks it here, before a publish,
// a key's operation or a consumer leaves the process; bus.Request does the same for requests.
// Replies need no check: the server accepted the request's line, which held the reply subject
// and a longer request subject than any reply line adds.

// replyAllowance is the room left on a line for a reply inbox (_INBOX.<identity>.<22>.<22>).
const replyAllowance = 128

// maxSubjectLen is the longest subject a line may hold: the line is the subject, a space, a reply
// inbox, a space and two byte counts of up to 10 digits.
const maxSubjectLen = protocol.MaxControlLine - 1 - replyAllowance - 1 - 10 - 1 - 10

// consumerNameAllowance is the room an API subject leaves for a consumer's name when it has none
// yet (ordered consumers name themselves: a nuid and a serial).
const consumerNameAllowance = 40

// CheckSubject refuses (CodeTooLarge) a subject that would make a protocol line longer than the
// server accepts.
func CheckSubject(subject string) error {
	if len(subject) > maxSubjectLen {
		return protocol.Errorf(protocol.CodeTooLarge, "subject %.40q… is %d bytes long; a NATS server closes the connection of a line over %d bytes, so it was not sent",
			subject, len(subject), protocol.MaxControlLine)
	}
	return nil
}

// checkLen is CheckSubject for a subject known by its length: an API subject built around a
// shorter one.
func checkLen(what string, n int) error {
	if n > maxSubjectLen {
		return protocol.Errorf(protocol.CodeTooLarge, "%s would make a %d-byte subject; a NATS server closes the connection of a line over %d bytes, so it was not sent",
			what, n, protocol.MaxControlLine)
	}
	return nil
}

// guardedJS is a connection's JetStream context with every subject checked before it is sent.
type guardedJS struct {
	jetstream.JetStream
}

func (g guardedJS) Publish(ctx context.Context, subject string, payload []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if err := CheckSubject(subject); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return g.JetStream.Publish(ctx, subject, payload, opts...)
}

func (g guardedJS) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if err := CheckSubject(msg.Subject); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return g.JetStream.PublishMsg(ctx, msg, opts...)
}

func (g guardedJS) PublishAsync(subject string, payload []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if err := CheckSubject(subject); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return g.JetStream.PublishAsync(subject, payload, opts...)
}

func (g guardedJS) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if err := CheckSubject(msg.Subject); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return g.JetStream.PublishMsgAsync(msg, opts...)
}

// checkConsumer checks the API subject that creates a consumer: with one filter subject, the
// server's API takes it in the subject ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>).
func checkConsumer(stream, name string, filters ...string) error {
	for _, f := range filters {
		n := len("$JS.API.CONSUMER.CREATE.") + len(stream) + 1 + max(len(name), consumerNameAllowance) + 1 + len(f)
		if err := checkLen("a consumer of "+stream+" on a long filter subject", n); err != nil {
			return err
		}
	}
	return nil
}

func consumerFilters(cfg jetstream.ConsumerConfig) []string {
	return append([]string{cfg.FilterSubject}, cfg.FilterSubjects...)
}

func (g guardedJS) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if err := checkConsumer(stream, cfg.Name+cfg.Durable, consumerFilters(cfg)...); err != nil {
		return nil, err
	}
	return g.JetStream.CreateConsumer(ctx, stream, cfg)
}

func (g guardedJS) CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if err := checkConsumer(stream, cfg.Name+cfg.Durable, consumerFilters(cfg)...); err != nil {
		return nil, err
	}
	return g.JetStream.CreateOrUpdateConsumer(ctx, stream, cfg)
}

func (g guardedJS) UpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if err := checkConsumer(stream, cfg.Name+cfg.Durable, consumerFilters(cfg)...); err != nil {
		return nil, err
	}
	return g.JetStream.UpdateConsumer(ctx, stream, cfg)
}

func (g guardedJS) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	if err := checkConsumer(stream, cfg.NamePrefix, cfg.FilterSubjects...); err != nil {
		return nil, err
	}
	return g.JetStream.OrderedConsumer(ctx, stream, cfg)
}

func (g guardedJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	return guardKV(g.JetStream.KeyValue(ctx, bucket))
}

func (g guardedJS) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return guardKV(g.JetStream.CreateKeyValue(ctx, cfg))
}

func (g guardedJS) UpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return guardKV(g.JetStream.UpdateKeyValue(ctx, cfg))
}

func (g guardedJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return guardKV(g.JetStream.CreateOrUpdateKeyValue(ctx, cfg))
}

func guardKV(kv jetstream.KeyValue, err error) (jetstream.KeyValue, error) {
	if err != nil {
		return nil, err
	}
	return guardedKV{kv}, nil
}

// guardedKV is a bucket whose keys are checked before any operation on them is sent.
type guardedKV struct {
	jetstream.KeyValue
}

// check refuses a key whose longest API subject (a watch of it: the consumer's create subject
// around $KV.<bucket>.<key>) the server would refuse. A key's reads ($JS.API.DIRECT.GET...) and
// writes ($KV.<bucket>.<key>) are shorter.
func (g guardedKV) check(keys ...string) error {
	b := g.Bucket()
	for _, key := range keys {
		if err := checkConsumer("KV_"+b, "", protocol.KVKey(b, key)); err != nil {
			return fmt.Errorf("key of bucket %s: %w", b, err)
		}
	}
	return nil
}

func (g guardedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if err := g.check(key); err != nil {
		return nil, err
	}
	return g.KeyValue.Get(ctx, key)
}

func (g guardedKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	if err := g.check(key); err != nil {
		return nil, err
	}
	return g.KeyValue.GetRevision(ctx, key, revision)
}

func (g guardedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := g.check(key); err != nil {
		return 0, err
	}
	return g.KeyValue.Put(ctx, key, value)
}

func (g guardedKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	if err := g.check(key); err != nil {
		return 0, err
	}
	return g.KeyValue.PutString(ctx, key, value)
}

func (g guardedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if err := g.check(key); err != nil {
		return 0, err
	}
	return g.KeyValue.Create(ctx, key, value, opts...)
}

func (g guardedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	if err := g.check(key); err != nil {
		return 0, err
	}
	return g.KeyValue.Update(ctx, key, value, revision)
}

func (g guardedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if err := g.check(key); err != nil {
		return err
	}
	return g.KeyValue.Delete(ctx, key, opts...)
}

func (g guardedKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if err := g.check(key); err != nil {
		return err
	}
	return g.KeyValue.Purge(ctx, key, opts...)
}

func (g guardedKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if err := g.check(keys); err != nil {
		return nil, err
	}
	return g.KeyValue.Watch(ctx, keys, opts...)
}

func (g guardedKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if err := g.check(keys...); err != nil {
		return nil, err
	}
	return g.KeyValue.WatchFiltered(ctx, keys, opts...)
}

func (g guardedKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	if err := g.check(filters...); err != nil {
		return nil, err
	}
	return g.KeyValue.ListKeysFiltered(ctx, filters...)
}

func (g guardedKV) History(ctx context.Context, key string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	if err := g.check(key); err != nil {
		return nil, err
	}
	return g.KeyValue.History(ctx, key, opts...)
}
