package core

import (
	"errors"
	"fmt"
)

// APIError is a failed provider call after the backend's retries. Status is the last HTTP
// status (0 when no HTTP answer came: a reset, a timeout); Attempts counts the tries made.
type APIError struct {
	Provider  string
	Status    int
	Attempts  int
	Transient bool // the last failure was of a retryable kind (the retries ran out)
	Err       error
}

func (e *APIError) Error() string {
	what := "call failed"
	if e.Transient {
		what = fmt.Sprintf("gave up after %d attempts", e.Attempts)
	}
	if e.Status != 0 {
		return fmt.Sprintf("%s: HTTP %d: %s: %v", e.Provider, e.Status, what, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.Provider, what, e.Err)
}

func (e *APIError) Unwrap() error { return e.Err }

// HTTPStatus returns the HTTP status of a provider error, or 0.
func HTTPStatus(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}
