package protocol

// Fault is the error part of every reply that crosses the wire: why, in words, and the code of
// the table (errcode.go) that says what kind of failure it is. An empty Fault is a success. A
// reply type embeds it, so its JSON and msgpack carry "error" and "code" beside its own fields,
// and the transports (bus.Respond, the gateway's HTTP errors) set the micro and HTTP statuses
// from the same code.
type Fault struct {
	Error string `msgpack:"error,omitempty" json:"error,omitempty"`
	Code  Code   `msgpack:"code,omitempty" json:"code,omitempty"`
}

// Err is the reply's error as an *Error, nil when it carries none: what a caller returns, and
// decides on by its code. A reply from a build that wrote no code reads as internal.
func (f *Fault) Err() error {
	if f.Error == "" && f.Code == "" {
		return nil
	}
	c := f.Code
	if c == "" {
		c = CodeInternal
	}
	msg := f.Error
	if msg == "" {
		msg = string(c)
	}
	return &Error{Code: c, Msg: msg}
}

// Fail writes err into the reply: its text and its code (CodeOf: internal when nothing in its
// chain says otherwise). A nil err clears it.
func (f *Fault) Fail(err error) {
	if err == nil {
		*f = Fault{}
		return
	}
	f.Error, f.Code = err.Error(), CodeOf(err)
}

// Reply is a message that answers a request: Err is its error (nil on success). Every reply
// type embeds Fault, except ToolReply, whose ToolResult says it.
type Reply interface {
	Message
	Err() error
}

// Failable is a reply an error can be written into: every reply type that embeds Fault.
type Failable interface {
	Reply
	Fail(err error)
}

// toolKindCodes is the code of each tool failure kind: the kind says what went wrong for the
// model and the miner, the code what class of failure it is for the transports.
var toolKindCodes = map[string]Code{
	ToolErrUnknown:     CodeNotFound,
	ToolErrBadArgs:     CodeBadRequest,
	ToolErrStart:       CodeInternal,
	ToolErrTimeout:     CodeTimeout,
	ToolErrMalformed:   CodeToolFailed,
	ToolErrExit:        CodeToolFailed,
	ToolErrTooLarge:    CodeTooLarge,
	ToolErrUnavailable: CodeUnavailable,
	ToolErrBusy:        CodeTooMany,
	ToolErrToolError:   CodeToolFailed,
	ToolErrCancelled:   CodeCancelled,
	ToolErrBudget:      CodeRejected,
}

// ToolKinds lists every tool failure kind, for tests.
func ToolKinds() []string {
	out := make([]string, 0, len(toolKindCodes))
	for k := range toolKindCodes {
		out = append(out, k)
	}
	return out
}

// ToolKindCode is the code of a tool failure kind (internal for a kind this build does not know).
func ToolKindCode(kind string) Code {
	if c, ok := toolKindCodes[kind]; ok {
		return c
	}
	return CodeInternal
}

// Err is the tool call's failure as an *Error (nil when OK): its Code, or its Kind's when the
// reply came without one.
func (r *ToolResult) Err() error {
	if r.OK {
		return nil
	}
	c := r.Code
	if c == "" {
		c = ToolKindCode(r.Kind)
	}
	msg := r.Error
	if msg == "" {
		msg = "tool call failed (" + r.Kind + ")"
	}
	return &Error{Code: c, Msg: msg}
}

// Coded fills in the code of a failed result from its kind when it has none yet.
func (r *ToolResult) Coded() {
	if !r.OK && r.Code == "" {
		r.Code = ToolKindCode(r.Kind)
	}
}
