package protocol

import (
	"errors"
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

// A bare status (a micro error header without a body) reads back as a code of that status, and
// every tool failure kind has a code of the table.
func TestStatusesAndToolKindsMapToCodes(t *testing.T) {
	for _, c := range Codes() {
		if got := CodeOfStatus(c.ServiceCode()); got.HTTPStatus() != c.HTTPStatus() {
			t.Errorf("%s: header %s reads back as %s (status %d)", c, c.ServiceCode(), got, got.HTTPStatus())
		}
		if c.Doc() == "" {
			t.Errorf("%s has no meaning in the table", c)
		}
	}
	if got := CodeOfStatus("503"); got != CodeUnavailable {
		t.Errorf("a bare 503 reads as %s, want unavailable", got)
	}
	if got := CodeOfStatus("not a status"); got != CodeInternal {
		t.Errorf("a malformed header reads as %s, want internal", got)
	}
	for _, k := range ToolKinds() {
		if !ToolKindCode(k).Known() {
			t.Errorf("tool kind %s has no code", k)
		}
	}
}

// A reply's Fault holds an error's code and text, and gives them back as a coded error.
func TestFaultCarriesTheCode(t *testing.T) {
	var rep MemoryGetReply
	if rep.Err() != nil {
		t.Fatal("an empty reply reads as failed")
	}
	rep.Fail(fmt.Errorf("memoryd get: %w", Errorf(CodeNotFound, "memory entry not found")))
	if rep.Code != CodeNotFound || rep.Error != "memoryd get: memory entry not found" {
		t.Fatalf("fault %+v", rep.Fault)
	}
	if err := rep.Err(); CodeOf(err) != CodeNotFound || err.Error() != rep.Error {
		t.Fatalf("Err() = %v (%s)", err, CodeOf(err))
	}
	rep.Fault = Fault{Error: "from an older build"}
	if CodeOf(rep.Err()) != CodeInternal {
		t.Error("an error without a code must read as internal")
	}
	tr := ToolResult{Kind: ToolErrBusy, Error: "busy"}
	if CodeOf(tr.Err()) != CodeTooMany || (&ToolResult{OK: true}).Err() != nil {
		t.Errorf("tool result code %s", CodeOf(tr.Err()))
	}
}

// Wrap gives an error a code and keeps what it wraps.
func TestWrapKeepsTheChain(t *testing.T) {
	base := errors.New("nats: no responders available for request")
	err := fmt.Errorf("request x: %w", Wrap(CodeUnavailable, base))
	if CodeOf(err) != CodeUnavailable || !errors.Is(err, base) {
		t.Fatalf("CodeOf %s, errors.Is %v", CodeOf(err), errors.Is(err, base))
	}
	if Wrap(CodeInternal, nil) != nil {
		t.Fatal("Wrap(nil) is not nil")
	}
}
