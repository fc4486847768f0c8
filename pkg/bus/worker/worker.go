// Package worker is the one JetStream consumer loop of the mesh. A role hands it a handler; the
// worker owns the rest: a bounded pool, pulling only while a worker is free, in-progress
// heartbeats while a message is handled, ack, nak with backoff, term, the DLQ for every message
// that cannot be decoded, is terminated, or runs out of deliveries, and holding messages while
// the mesh's store is full. No message is terminated before its dead letter is stored.
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
// the DLQ; an error that comes from a full store holds the message until the store writes again
// and runs it again; any other error naks it for a later delivery (until the consumer's
// MaxDeliveries, then the DLQ).
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
	// The heartbeat lasts until the message is settled: through the handler, a wait for
	// storage and the writing of its dead letter.
	beat, stopBeat := context.WithCancel(hctx)
	defer stopBeat()
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
	log := w.opts.Logger.With("subject", m.Subject())
	delivered := uint64(1)
	if meta, err := m.Metadata(); err == nil {
		delivered = meta.NumDelivered
	}
	if md := w.spec.MaxDeliveries; md > 0 && delivered > uint64(md) {
		// An earlier delivery was its last and could not be dead-lettered (the process stopped
		// first, or the DLQ could not be written): do it now, without running it again.
		w.dead(runCtx, m, fmt.Sprintf("delivered %d times, more than the %d allowed; its last failure was not recorded", delivered, md), log)
		return
	}
	var err error
	var retry backoff.BackOff // while held: how long until the next try
	for {
		// A message is not started while the store cannot write: it is held until it can.
		if w.storageFull(runCtx, false) && !w.hold(runCtx, &retry, errStorageFull, log) {
			err = fmt.Errorf("stopped while waiting for the store: %w", context.Cause(runCtx))
			break
		}
		err = w.attempt(hctx, m)
		if err == nil || IsPermanent(err) || runCtx.Err() != nil {
			break
		}
		if !bus.IsStorageFull(err) && !errors.Is(err, errStorageFull) && !w.storageFull(runCtx, true) {
			break
		}
		// The failure came from the store: it is no fault of the message and must not use up
		// its deliveries. Hold the message (heartbeated) until the store takes writes again.
		if !w.hold(runCtx, &retry, err, log) {
			break
		}
	}
	w.settle(runCtx, m, err, delivered, log)
}

// errStorageFull is the cause an attempt is cut short with when the store stops writing.
var errStorageFull = errors.New("the mesh's store cannot write")

// attempt runs the handler once, within Options.Timeout. Should the mesh report its store full
// meanwhile (bus.Conn.Storage), the attempt is cut short: a write onto a full disk gets no
// answer from the server and would hold the handler until its deadline.
func (w *Worker) attempt(hctx context.Context, m jetstream.Msg) error {
	ctx, cancel := context.WithCancelCause(hctx)
	defer cancel(nil)
	if w.opts.Timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, w.opts.Timeout)
		defer stop()
	}
	go func() {
		t := time.NewTicker(storageLook)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if w.storageFull(ctx, false) {
					cancel(errStorageFull)
					return
				}
			}
		}
	}()
	err := w.call(ctx, m)
	if err != nil && errors.Is(context.Cause(ctx), errStorageFull) {
		err = fmt.Errorf("%w: %w", errStorageFull, err)
	}
	return err
}

// storageLook is how often a running attempt, or a held message, looks at the store's state.
const storageLook = time.Second

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

// storageFull reports whether the mesh says its store cannot write (bus.Conn.Storage; a mesh
// whose server is not embedded says nothing, and the server's error codes speak instead).
func (w *Worker) storageFull(ctx context.Context, fresh bool) bool {
	return w.c.Storage(ctx, w.names, fresh).State == protocol.StorageFull
}

// hold keeps a message until the store can write again, and reports whether to run it again
// (false: the worker stops meanwhile). While the mesh says its store is full it looks again
// every storageLook; a refusal by a stream's own limit (the store as a whole writes) clears when
// the stream drains, which no state reports: that message is tried again after a wait that grows
// to storageRetryMax. *retry is the wait, kept across the holds of one message.
func (w *Worker) hold(runCtx context.Context, retry *backoff.BackOff, err error, log *slog.Logger) bool {
	if *retry == nil {
		log.Warn("store full: holding the message until it can be written", "err", err)
		b := backoff.NewExponentialBackOff()
		b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 200*time.Millisecond, storageRetryMax, 0
		*retry = b
	}
	for {
		select {
		case <-runCtx.Done():
			return false
		case <-time.After((*retry).NextBackOff()):
		}
		if !w.storageFull(runCtx, false) {
			return true
		}
	}
}

// storageRetryMax bounds the wait between two tries of a message a stream's limit refused.
const storageRetryMax = 5 * time.Second

func (w *Worker) settle(runCtx context.Context, m jetstream.Msg, err error, delivered uint64, log *slog.Logger) {
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
		w.dead(runCtx, m, err.Error(), log)
		return
	case runCtx.Err() != nil:
		// Stopping: hand the message to another process now instead of after AckWait.
		_ = m.Nak()
		return
	}
	if md := w.spec.MaxDeliveries; md > 0 && delivered >= uint64(md) {
		w.dead(runCtx, m, fmt.Sprintf("failed on all %d deliveries; last error: %v", delivered, err), log)
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

// dead records the message in the DLQ, then terminates it: a message leaves its stream only once
// its dead letter is stored. While the DLQ cannot be written (a full disk) the worker keeps the
// message, heartbeated, and writes again with a growing wait; if it stops meanwhile, it naks the
// message, which comes back (the server sets no delivery limit): past MaxDeliveries it is then
// dead-lettered without running.
func (w *Worker) dead(runCtx context.Context, m jetstream.Msg, reason string, log *slog.Logger) {
	wait := backoff.NewExponentialBackOff()
	wait.InitialInterval, wait.MaxInterval, wait.MaxElapsedTime = 500*time.Millisecond, w.opts.MaxNakDelay, 0
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), 10*time.Second)
		err := bus.DeadLetter(ctx, w.c.JS, w.names, m, reason)
		cancel()
		if err == nil {
			log.Error("message moved to the DLQ", "reason", reason)
			_ = m.TermWithReason(clip(reason, 200))
			return
		}
		if try == 1 {
			log.Error("message not dead-lettered yet; holding it and writing again", "reason", reason, "err", err)
		}
		select {
		case <-runCtx.Done():
			_ = m.Nak()
			return
		case <-time.After(wait.NextBackOff()):
		}
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
