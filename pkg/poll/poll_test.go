package poll

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	err := Wait(5*time.Second, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n.Load() != 3 {
		t.Fatalf("err %v after %d checks, want nil after 3", err, n.Load())
	}
}

func TestWaitGivesTheLastErrorAtTheDeadline(t *testing.T) {
	err := Wait(3*Interval, func() error { return errors.New("still down") })
	if err == nil || err.Error() != "still down" {
		t.Fatalf("err %v, want the check's own error", err)
	}
}

// fakeTB records a failure instead of ending the test, to check the helpers fail when they must.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func failsWith(t *testing.T, fn func(tb testing.TB)) bool {
	t.Helper()
	f := &fakeTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(f) {
				panic(r)
			}
		}()
		fn(f)
	}()
	return f.failed != ""
}

func TestQuietFailsWhenTheConditionBreaks(t *testing.T) {
	start := time.Now()
	broke := failsWith(t, func(tb testing.TB) {
		Quiet(tb, time.Minute, "calm", func() error {
			if time.Since(start) > 3*Interval {
				return errors.New("an event arrived")
			}
			return nil
		})
	})
	if !broke {
		t.Fatal("Quiet passed although the condition broke inside the window")
	}
	if !failsWith(t, func(tb testing.TB) { True(tb, 2*Interval, "never", func() bool { return false }) }) {
		t.Fatal("True passed although the condition never held")
	}
	if failsWith(t, func(tb testing.TB) { Quiet(tb, 2*Interval, "calm", func() error { return nil }) }) {
		t.Fatal("Quiet failed although the condition held")
	}
}

func TestReceiveReturnsTheValueOrFails(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if v := Receive(t, time.Second, "seven", ch); v != 7 {
		t.Fatalf("received %d, want 7", v)
	}
	done := make(chan struct{})
	if !failsWith(t, func(tb testing.TB) { Receive(tb, 2*Interval, "a signal never sent", done) }) {
		t.Fatal("Receive passed although nothing was sent")
	}
	close(done)
	if failsWith(t, func(tb testing.TB) { Receive(tb, time.Second, "a closed channel", done) }) {
		t.Fatal("Receive failed on a closed channel")
	}
}
