package protocol

// Delta is a piece of a model's answer as it is generated, published on Names.Delta(session)
// by the executor running the step: plain NATS, kept nowhere, at most once. The pieces of one
// model turn (step, turn) carry Seq 1, 2, 3 ... in order, so a gap tells a reader it missed
// one; the trace event of the turn (model_call, and the thought or the step's answer) holds
// the whole text either way, and a reader shows that once the turn ends.
type Delta struct {
	Header
	SessionID string `msgpack:"session_id" json:"session_id" id:"session"`
	StepID    string `msgpack:"step_id" json:"step_id" id:"step"`
	Turn      int    `msgpack:"turn" json:"turn"`
	Seq       int    `msgpack:"seq" json:"seq"`
	// Text continues the turn's answer (a batch of the provider's pieces).
	Text string `msgpack:"text,omitempty" json:"text,omitempty"`
	// Restart: the turn's text so far is void and the model answers again from the start (a
	// reply cut at max_tokens, asked again with a larger limit). A reader drops what it showed.
	Restart bool `msgpack:"restart,omitempty" json:"restart,omitempty"`
	// Done: the turn's answer is complete (or its call failed); nothing more comes for it.
	Done bool `msgpack:"done,omitempty" json:"done,omitempty"`
}

// MaxDeltaBytes bounds the text of one Delta; a publisher flushes before it would exceed it.
const MaxDeltaBytes = 16 << 10
