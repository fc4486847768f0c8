package protocol

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Code classifies an error that crosses the wire: a reply's `code` field, the micro header
// Nats-Service-Error-Code (as the HTTP status of the same failure) and the HTTP API's error body
// all carry it, so no caller ever matches on an error's text. The table below is the one place
// that says what each code means to HTTP and to the CLI's exit status.
type Code string

// Every code an error on the wire may carry. Adding one means adding its row to codeTable.
const (
	CodeBadRequest       Code = "bad_request"            // the request could not be read or an argument is malformed
	CodeTooLarge         Code = "too_large"              // a body, field or identifier is over its limit
	CodeUnsupportedMedia Code = "unsupported_media_type" // neither JSON nor msgpack
	CodeUnauthorized     Code = "unauthorized"           // no or a wrong credential
	CodeForbidden        Code = "forbidden"              // the caller may not do this
	CodeNotFound         Code = "not_found"              // no such session, entry, tool or route
	CodeMethodNotAllowed Code = "method_not_allowed"     // the route exists with other methods
	CodeConflict         Code = "conflict"               // the state changed underneath; read again
	CodeRejected         Code = "rejected"               // permanent: the request is refused as it is
	CodeTooMany          Code = "too_many_requests"      // a per-caller limit is reached; try later
	CodeTransient        Code = "transient"              // the mesh could not serve it now; the same request may succeed later
	CodeStorageFull      Code = "storage_full"           // JetStream cannot write (disk or limits full); retry once space is freed
	CodeUnavailable      Code = "unavailable"            // a role this needs is not running (memoryd, a tool's host)
	CodeTimeout          Code = "timeout"                // the deadline passed before an answer
	CodeCancelled        Code = "cancelled"              // the session or call was cancelled
	CodeInternal         Code = "internal"               // a bug or an unexpected failure; the reason says where
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
}

var codeTable = map[Code]codeRow{
	CodeBadRequest:       {http.StatusBadRequest, ExitDataErr, false},
	CodeTooLarge:         {http.StatusRequestEntityTooLarge, ExitDataErr, false},
	CodeUnsupportedMedia: {http.StatusUnsupportedMediaType, ExitDataErr, false},
	CodeUnauthorized:     {http.StatusUnauthorized, ExitNoPerm, false},
	CodeForbidden:        {http.StatusForbidden, ExitNoPerm, false},
	CodeNotFound:         {http.StatusNotFound, ExitNotFound, false},
	CodeMethodNotAllowed: {http.StatusMethodNotAllowed, ExitUsage, false},
	CodeConflict:         {http.StatusConflict, ExitTempFail, true},
	CodeRejected:         {http.StatusUnprocessableEntity, ExitDataErr, false},
	CodeTooMany:          {http.StatusTooManyRequests, ExitTempFail, true},
	CodeTransient:        {http.StatusServiceUnavailable, ExitTempFail, true},
	CodeStorageFull:      {http.StatusServiceUnavailable, ExitTempFail, true},
	CodeUnavailable:      {http.StatusServiceUnavailable, ExitUnavailable, true},
	CodeTimeout:          {http.StatusGatewayTimeout, ExitTempFail, true},
	CodeCancelled:        {499, ExitOutcome, false},
	CodeInternal:         {http.StatusInternalServerError, ExitInternal, false},
}

// Codes lists every code, for documents and tests.
func Codes() []Code {
	out := make([]Code, 0, len(codeTable))
	for c := range codeTable {
		out = append(out, c)
	}
	return out
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

// Error is an error with a code, for handlers to return and transports to render. Wrap one
// with fmt.Errorf("...: %w", err) freely: CodeOf finds it through the chain.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Errorf makes an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf is the code of the first *Error in err's chain, or CodeInternal when there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
