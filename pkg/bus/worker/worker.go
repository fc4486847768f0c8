// Package worker is the one JetStream consumer loop of the mesh. A role hands it a handler; the
// worker owns the rest: a bounded pool, pulling only while a worker is free, in-progress
// heartbeats while a message is handled, ack, nak with backoff, term, and the DLQ for every
// message that cannot be decoded, is terminated, or runs out of deliveries.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Handler handles one message. nil acks it; an error made with Permanent terminates it into
// the DLQ; any other error naks it for a later delivery (until MaxDeliver, then the DLQ).
type Handler func(ctx context.Context, m jetstream.Msg) error

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent marks err as one no redelivery can fix: the message goes to the DLQ with err as the
// reason, and is terminated.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// Decode unmarshals a message into v; a failure is Permanent (garbage never gets better).
func Decode(m jetstream.Msg, v protocol.Message) error {
	if err := protocol.Unmarshal(m.Data(), v); err != nil {
		return Permanent(fmt.Errorf("undecodable message on %s: %w", m.Subject(), err))
	}
	return nil
}

// Options tune one worker. Zero values take the consumer spec's settings.
type Options struct {
	// Workers is how many messages are handled at once (0: the spec's Workers).
	Workers int
	// Timeout bounds one message's handling (0: none).
	Timeout time.Duration
	// Grace is how long handlers already running may go on after ctx ends before their context
	// is cancelled (0: cancelled at once). A handler cut short is nakked for another process.
	Grace time.Duration
	// NakDelay is the first redelivery delay after an error; it doubles per delivery up to
	// MaxNakDelay (0: 1 s and 30 s).
	NakDelay, MaxNakDelay time.Duration
	// MaxWaiting bounds the handlers that have handed their slot back while they wait (see
	// Waiting), so the messages in hand stay bounded (0: 8 × Workers).
	MaxWaiting int
	// Acked, when set, is called after a message the handler handled is acked.
	Acked  func(jetstream.Msg)
	Logger *slog.Logger
}

// Worker consumes one durable consumer.
type Worker struct {
	c     *bus.Conn
	names protocol.Names
	spec  bus.ConsumerSpec
	cons  jetstream.Consumer
	opts  Options
	fn    Handler
}

// New creates or updates the consumer of spec and returns a worker for it.
func New(ctx context.Context, c *bus.Conn, names protocol.Names, spec bus.ConsumerSpec, opts Options, fn Handler) (*Worker, error) {
	cons, err := c.JS.CreateOrUpdateConsumer(ctx, spec.Stream, spec.Config)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", spec.Config.Durable, spec.Stream, err)
	}
	if opts.Workers <= 0 {
		opts.Workers = max(spec.Workers, 1)
	}
	if opts.MaxWaiting <= 0 {
		opts.MaxWaiting = 8 * opts.Workers
	}
	if opts.NakDelay <= 0 {
		opts.NakDelay = time.Second
	}
	if opts.MaxNakDelay <= 0 {
		opts.MaxNakDelay = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Logger = opts.Logger.With("consumer", spec.Config.Durable)
	return &Worker{c: c, names: names, spec: spec, cons: cons, opts: opts, fn: fn}, nil
}

// fetchWait is how long one pull request waits for messages before the worker asks again.
const fetchWait = 5 * time.Second

// Run pulls and handles messages until ctx ends, then waits for the handlers running (within
// the grace period) and returns nil. It pulls only as many messages as it has free workers, and
// hands each to a worker as it arrives, so every message it holds is heartbeated: none waits
// unseen in a client buffer until its AckWait lapses and it is delivered a second time.
func (w *Worker) Run(ctx context.Context) error {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(w.opts.Grace, cancel) })
	defer stopGrace()

	sem := make(chan struct{}, w.opts.Workers)
	waiting := make(chan struct{}, w.opts.MaxWaiting)
	// A pull that fails (no stream or consumer leader during an election, a deleted consumer)
	// fails again at once: the next one waits, longer each time, so a worker neither spins nor
	// floods the log, and is back within a second of the cause going away.
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.Multiplier, retry.MaxInterval, retry.MaxElapsedTime = 50*time.Millisecond, 2, time.Second, 0
	pause := func(err error) bool {
		w.opts.Logger.Warn("pull", "err", err)
		select {
		case <-time.After(retry.NextBackOff()):
			return true
		case <-ctx.Done():
			return false
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		// Take one free place (waiting for it), then every other one free now.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
	more:
		for free < w.opts.Workers {
			select {
			case sem <- struct{}{}:
				free++
			default:
				break more
			}
		}
		fctx, fcancel := context.WithTimeout(ctx, fetchWait)
		batch, err := w.cons.Fetch(free, jetstream.FetchContext(fctx))
		if err != nil {
			fcancel()
			for ; free > 0; free-- {
				<-sem
			}
			if ctx.Err() != nil || !pause(err) {
				return nil
			}
			continue
		}
		msgs := batch.Messages()
	recv:
		for free > 0 {
			select {
			case msg, ok := <-msgs:
				if !ok {
					break recv
				}
				free--
				wg.Add(1)
				go func() {
					defer wg.Done()
					sl := &slot{sem: sem, waiting: waiting, held: true}
					defer sl.done()
					w.handle(context.WithValue(hctx, slotKey{}, sl), ctx, msg)
				}()
			case <-ctx.Done():
				// Stopping: whatever the open pull still brings goes back at once.
				go func() {
					for msg := range msgs {
						_ = msg.Nak()
					}
				}()
				break recv
			}
		}
		fcancel()
		for ; free > 0; free-- {
			<-sem
		}
		err = batch.Error()
		switch {
		case ctx.Err() != nil:
		case err == nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			retry.Reset() // a pull that ended normally, with or without messages
		case !pause(err):
			return nil
		}
	}
}

// slot is one handler's place in the pool. A handler that waits on work the pool itself may have
// to run (an agent's step waiting for a child session of the same agent) moves from the pool to
// the waiting places and stays there until it ends; otherwise a chain of such waits as deep as
// the pool is wide would deadlock. It does not take a pool place back after the wait: the puller
// holds a free place while it waits for the next message, so a handler queueing for one could
// wait forever.
type slot struct {
	sem, waiting chan struct{}
	mu           sync.Mutex
	held         bool // the handler holds a place in sem
	parked       bool // the handler holds a place in waiting
}

type slotKey struct{}

// Waiting runs fn, a wait on other messages of the same consumer (a child session of the same
// agent), with the calling handler's pool place handed back, so the worker pulls and runs other
// messages meanwhile. The handler then counts against Options.MaxWaiting until it ends, so at
// most Workers + MaxWaiting messages are in hand. When MaxWaiting handlers already wait, or ctx
// did not come from a worker, fn runs holding the place.
func Waiting(ctx context.Context, fn func()) {
	if sl, _ := ctx.Value(slotKey{}).(*slot); sl != nil {
		sl.park()
	}
	fn()
}

// park moves the handler from the pool to the waiting places, when there is room.
func (s *slot) park() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parked {
		return
	}
	select {
	case s.waiting <- struct{}{}:
	default:
		return
	}
	s.parked = true
	if s.held {
		<-s.sem
		s.held = false
	}
}

// done gives back whatever place the handler holds.
func (s *slot) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		<-s.sem
	}
	if s.parked {
		<-s.waiting
	}
	s.held, s.parked = false, false
}

func (w *Worker) handle(hctx, runCtx context.Context, m jetstream.Msg) {
	if w.opts.Timeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(hctx, w.opts.Timeout)
		defer cancel()
	}
	beat, stopBeat := context.WithCancel(hctx)
	go func() {
		t := time.NewTicker(max(w.spec.Config.AckWait/3, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-beat.Done():
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	err := w.call(hctx, m)
	stopBeat()
	w.settle(runCtx, m, err)
}

// call runs the handler, turning a panic into a permanent error so one bad message cannot take
// the process down.
func (w *Worker) call(ctx context.Context, m jetstream.Msg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(fmt.Errorf("handler panicked: %v", p))
		}
	}()
	return w.fn(ctx, m)
}

func (w *Worker) settle(runCtx context.Context, m jetstream.Msg, err error) {
	log := w.opts.Logger.With("subject", m.Subject())
	switch {
	case err == nil:
		if aerr := m.Ack(); aerr != nil {
			log.Warn("ack", "err", aerr)
		}
		if w.opts.Acked != nil {
			w.opts.Acked(m)
		}
		return
	case IsPermanent(err):
		w.dead(m, err.Error(), log)
		return
	case runCtx.Err() != nil:
		// Stopping: hand the message to another process now instead of after AckWait.
		_ = m.Nak()
		return
	}
	delivered := uint64(1)
	if meta, merr := m.Metadata(); merr == nil {
		delivered = meta.NumDelivered
	}
	if md := w.spec.Config.MaxDeliver; md > 0 && delivered >= uint64(md) {
		w.dead(m, fmt.Sprintf("failed on all %d deliveries; last error: %v", delivered, err), log)
		return
	}
	delay := w.opts.NakDelay
	for i := uint64(1); i < delivered && delay < w.opts.MaxNakDelay; i++ {
		delay *= 2
	}
	delay = min(delay, w.opts.MaxNakDelay)
	log.Warn("will retry message", "delivery", delivered, "in", delay, "err", err)
	_ = m.NakWithDelay(delay)
}

// dead records the message in the DLQ, then terminates it. When the DLQ cannot be written the
// message is nakked instead, so it is not lost.
func (w *Worker) dead(m jetstream.Msg, reason string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.DeadLetter(ctx, w.c.JS, w.names, m, reason); err != nil {
		log.Error("message not dead-lettered; will retry it", "reason", reason, "err", err)
		_ = m.NakWithDelay(w.opts.MaxNakDelay)
		return
	}
	log.Error("message moved to the DLQ", "reason", reason)
	_ = m.TermWithReason(clip(reason, 200))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
