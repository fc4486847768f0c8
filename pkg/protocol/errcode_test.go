package protocol

import (
	"fmt"
	"testing"
)

func TestEveryCodeMapsToAnHTTPStatusAndAnExitStatus(t *testing.T) {
	for _, c := range Codes() {
		if s := c.HTTPStatus(); s < 400 || s > 599 {
			t.Errorf("%s: HTTP status %d is not an error status", c, s)
		}
		if e := c.ExitStatus(); e == ExitOK {
			t.Errorf("%s: exit status 0 would read as success", c)
		}
	}
	if Code("no_such_code").Known() || Code("no_such_code").HTTPStatus() != 500 {
		t.Error("an unknown code must not pass for a known one")
	}
	if !CodeStorageFull.Retryable() || CodeRejected.Retryable() {
		t.Error("storage_full is worth retrying later, rejected is not")
	}
}

func TestCodeOfFindsTheCodeThroughWrapping(t *testing.T) {
	err := fmt.Errorf("get session: %w", Errorf(CodeTooLarge, "id is %d bytes, at most %d", 5000, 128))
	if got := CodeOf(err); got != CodeTooLarge {
		t.Fatalf("CodeOf = %q, want too_large", got)
	}
	if got := CodeOf(fmt.Errorf("plain")); got != CodeInternal {
		t.Fatalf("CodeOf(plain error) = %q, want internal", got)
	}
}
