// Package poll is how tests wait: they ask again until a condition holds (Eventually) or check
// that one keeps holding for a window (Quiet), never sleep a fixed time and hope. One helper for
// every module, like nats-server's checkFor.
package poll

import (
	"fmt"
	"testing"
	"time"
)

// Interval is how often a condition is asked again.
const Interval = 20 * time.Millisecond

// Eventually calls check until it returns nil, failing t with check's last error once timeout
// has passed. what names the awaited state in the failure.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	if err := Wait(timeout, check); err != nil {
		t.Fatalf("waiting %v for %s: %v", timeout, what, err)
	}
}

// True is Eventually for a condition that has no error to report.
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("not yet")
	})
}

// Wait calls check until it returns nil or timeout passes, and returns its last error: for a
// caller that is not a test's goroutine, or that handles the failure itself.
func Wait(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(Interval)
	}
}

// Quiet checks that check keeps returning nil for the whole window: for "nothing must happen
// within" assertions, which are the one place a test waits out a fixed time, and say so.
func Quiet(t testing.TB, window time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(window)
	for {
		if err := check(); err != nil {
			t.Fatalf("%s stopped holding within %v: %v", what, window, err)
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(Interval)
	}
}

// Receive waits up to timeout for a value from ch and returns it, failing t if none comes: a
// wait for one event the test can see (a signal, a result, a context ending).
func Receive[T any](t testing.TB, timeout time.Duration, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %v for %s", timeout, what)
		var zero T
		return zero
	}
}
