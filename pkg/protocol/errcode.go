package protocol

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
)

// Code classifies an error that crosses the wire: a reply's `code` field (Fault), the micro
// header Nats-Service-Error-Code (as the HTTP status of the same failure) and the HTTP API's
// error body all carry it, so no caller ever matches on an error's text. The table below is the
// one place that says what each code means to HTTP and to the CLI's exit status.
type Code string

// Every code an error on the wire may carry; what each means is its row of codeTable.
const (
	CodeBadRequest       Code = "bad_request"
	CodeTooLarge         Code = "too_large"
	CodeUnsupportedMedia Code = "unsupported_media_type"
	CodeUnauthorized     Code = "unauthorized"
	CodeForbidden        Code = "forbidden"
	CodeNotFound         Code = "not_found"
	CodeMethodNotAllowed Code = "method_not_allowed"
	CodeConflict         Code = "conflict"
	CodeRejected         Code = "rejected"
	CodeTooMany          Code = "too_many_requests"
	CodeTransient        Code = "transient"
	CodeStorageFull      Code = "storage_full"
	CodeUnavailable      Code = "unavailable"
	CodeTimeout          Code = "timeout"
	CodeCancelled        Code = "cancelled"
	CodeToolFailed       Code = "tool_failed"
	CodeInternal         Code = "internal"
)

// Exit statuses of the CLI, one per class of failure (BSD sysexits where one fits), so a script
// can tell "fix the input" from "try again later" without reading text.
const (
	ExitOK          = 0  // success or success_with_recovery
	ExitOutcome     = 1  // the task ran and ended without success (the outcome says how)
	ExitUsage       = 64 // the command line is wrong
	ExitDataErr     = 65 // the request was refused as it is (malformed, too large, rejected)
	ExitNotFound    = 66 // no such session, entry or file
	ExitUnavailable = 69 // no mesh, or a role it needs, is reachable
	ExitInternal    = 70 // an internal error
	ExitTempFail    = 75 // the mesh could not take it now (transient, storage full, timeout): retry
	ExitNoPerm      = 77 // not allowed
	ExitConfig      = 78 // the configuration is wrong
)

type codeRow struct {
	http int
	exit int
	// retry says whether sending the same request again later may succeed.
	retry bool
	doc   string
}

var codeTable = map[Code]codeRow{
	CodeBadRequest:       {http.StatusBadRequest, ExitDataErr, false, "the request could not be read or an argument is malformed"},
	CodeTooLarge:         {http.StatusRequestEntityTooLarge, ExitDataErr, false, "a body, field or identifier is over its limit"},
	CodeUnsupportedMedia: {http.StatusUnsupportedMediaType, ExitDataErr, false, "the body is neither JSON nor msgpack (on HTTP: not JSON)"},
	CodeUnauthorized:     {http.StatusUnauthorized, ExitNoPerm, false, "no or a wrong credential"},
	CodeForbidden:        {http.StatusForbidden, ExitNoPerm, false, "the caller may not do this (its identity's permissions, a cross-site browser request)"},
	CodeNotFound:         {http.StatusNotFound, ExitNotFound, false, "no such session, entry, tool or route"},
	CodeMethodNotAllowed: {http.StatusMethodNotAllowed, ExitUsage, false, "the route exists with other methods"},
	CodeConflict:         {http.StatusConflict, ExitTempFail, true, "the state changed underneath; read again"},
	CodeRejected:         {http.StatusUnprocessableEntity, ExitDataErr, false, "permanent: the request is refused as it is"},
	CodeTooMany:          {http.StatusTooManyRequests, ExitTempFail, true, "a per-caller limit is reached; try later"},
	CodeTransient:        {http.StatusServiceUnavailable, ExitTempFail, true, "the mesh could not serve it now; the same request may succeed later"},
	CodeStorageFull:      {http.StatusServiceUnavailable, ExitTempFail, true, "JetStream cannot write (disk or limits full); retry once space is freed"},
	CodeUnavailable:      {http.StatusServiceUnavailable, ExitUnavailable, true, "what this needs is not running or not ready (memoryd, a tool's host, a store to migrate)"},
	CodeTimeout:          {http.StatusGatewayTimeout, ExitTempFail, true, "the deadline passed before an answer"},
	CodeCancelled:        {499, ExitOutcome, false, "the session or call was cancelled"},
	CodeToolFailed:       {http.StatusBadGateway, ExitOutcome, false, "the tool ran and failed (an exit status, {ok: false}, output it could not give)"},
	CodeInternal:         {http.StatusInternalServerError, ExitInternal, false, "a bug or an unexpected failure; the reason says where"},
}

// byStatus is the code a bare HTTP status (a micro error header without a reply body) reads as:
// where several codes share a status, the most general of them.
var byStatus = map[int]Code{
	http.StatusServiceUnavailable: CodeUnavailable,
}

// Codes lists every code, sorted, for documents and tests.
func Codes() []Code {
	out := make([]Code, 0, len(codeTable))
	for c := range codeTable {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// CodeOfStatus is the code of an HTTP status or a Nats-Service-Error-Code header, for a refusal
// that came without a reply body to say it (internal for a status no code has).
func CodeOfStatus(status string) Code {
	n, err := strconv.Atoi(status)
	if err != nil {
		return CodeInternal
	}
	if c, ok := byStatus[n]; ok {
		return c
	}
	for _, c := range Codes() {
		if codeTable[c].http == n {
			return c
		}
	}
	return CodeInternal
}

// Known reports whether c is in the table.
func (c Code) Known() bool { _, ok := codeTable[c]; return ok }

// HTTPStatus is the status the HTTP API answers with for c (500 for an unknown code).
func (c Code) HTTPStatus() int {
	if r, ok := codeTable[c]; ok {
		return r.http
	}
	return http.StatusInternalServerError
}

// ServiceCode is c as the micro Nats-Service-Error-Code header carries it: the HTTP status.
func (c Code) ServiceCode() string { return strconv.Itoa(c.HTTPStatus()) }

// ExitStatus is the CLI's exit status for c (ExitInternal for an unknown code).
func (c Code) ExitStatus() int {
	if r, ok := codeTable[c]; ok {
		return r.exit
	}
	return ExitInternal
}

// Retryable says whether the same request may succeed later.
func (c Code) Retryable() bool { return codeTable[c].retry }

// Doc says what c means, in a few words, for documents.
func (c Code) Doc() string { return codeTable[c].doc }

// Error is an error with a code, for handlers to return and transports to render. Wrap one
// with fmt.Errorf("...: %w", err) freely: CodeOf finds it through the chain.
type Error struct {
	Code Code
	Msg  string
	// Err is the error this one classifies (Wrap), kept for errors.Is and errors.As.
	Err error
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

// Errorf makes an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap gives err a code, keeping its text and its chain. A nil err stays nil.
func Wrap(code Code, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Msg: err.Error(), Err: err}
}

// CodeOf is the code of the first *Error in err's chain, or CodeInternal when there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
