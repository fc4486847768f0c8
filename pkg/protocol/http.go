package protocol

// Bodies of the gateway's HTTP API (docs/openapi.json is generated from these types). Replies
// reuse the message types: SubmitReply, Session, CancelReply, Event.

// TaskBody is the body of POST /v1/tasks.
type TaskBody struct {
	Task      string  `json:"task" text:"task"`
	Agent     string  `json:"agent,omitempty" id:"agent"`
	SessionID string  `json:"session_id,omitempty" id:"session"`
	Budget    *Budget `json:"budget,omitempty"`
}

// MessageBody is the body of POST /v1/sessions/{id}/messages: the conversation's next turn.
// TurnID, minted by the client before its first try, makes a retried POST the same turn.
type MessageBody struct {
	Text   string  `json:"text" text:"task"`
	Budget *Budget `json:"budget,omitempty"`
	TurnID string  `json:"turn_id,omitempty" id:"turn"`
}

// ForkBody is the body of POST /v1/sessions/{id}/fork: a new conversation that continues the
// transcript of turn {id}, with Text as its first message. SessionID, minted by the client
// before its first try, makes a retried POST the same fork (the gateway mints one when empty).
type ForkBody struct {
	Text      string  `json:"text" text:"task"`
	SessionID string  `json:"session_id,omitempty" id:"session"`
	Budget    *Budget `json:"budget,omitempty"`
}

// CancelBody is the optional body of POST /v1/sessions/{id}/cancel.
type CancelBody struct {
	Reason string `json:"reason,omitempty"`
}

// APIError is every HTTP refusal's body: Code is the failure's code (the table in errcode.go,
// whose HTTP status the answer has), Error says why in words.
type APIError struct {
	Error string `json:"error"`
	Code  Code   `json:"code"`
}

// SSEDelta is the server-sent event type of a Delta on GET /v1/sessions/{id}/events; every
// other event of that stream is named by its trace event's type.
const SSEDelta = "delta"
