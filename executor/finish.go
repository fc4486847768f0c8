package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// finishTool is the built-in tool a model ends a step with, reporting in a structured way
// whether the task was accomplished. It is a tool call because every provider (and the scripted
// model) supports tool calls, where a text trailer would depend on the model's formatting. A
// plain-text answer without a tool failure is still a success; a finish with accomplished false is the
// outcome not_accomplished, which is not a success, whatever tools did on the way. A plain-text
// answer after a tool failure is not taken as a success: the model is asked once to report
// through finish, and an answer that still does not is not_accomplished.
const finishTool = protocol.ToolFinish

var finishDef = llm.ToolDef{
	Name: finishTool,
	Description: "End the task. Call it once, alone, when you are done: accomplished says whether the task " +
		"was actually accomplished (false when a required action failed or you had to give up), answer is " +
		"your final answer to the user, reason says what is missing when accomplished is false.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{` +
		`"accomplished":{"type":"boolean","description":"true only if the task was actually done"},` +
		`"answer":{"type":"string","description":"the final answer for the user"},` +
		`"reason":{"type":"string","description":"when not accomplished: why, and what is missing"}},` +
		`"required":["accomplished","answer"],"additionalProperties":false}`),
}

type finishReport struct {
	Accomplished *bool  `json:"accomplished"`
	Answer       string `json:"answer"`
	Reason       string `json:"reason"`
}

// finishCall returns the finish call of a turn, if the model made one.
func finishCall(calls []llm.ToolCall) (llm.ToolCall, bool) {
	for _, c := range calls {
		if c.Name == finishTool {
			return c, true
		}
	}
	return llm.ToolCall{}, false
}

// parseFinish checks a finish call's arguments.
func parseFinish(args json.RawMessage) (finishReport, error) {
	var rep finishReport
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return rep, fmt.Errorf("the arguments of finish are not {accomplished, answer, reason?}: %v", err)
	}
	if rep.Accomplished == nil {
		return rep, errors.New("finish needs accomplished: true or false")
	}
	if strings.TrimSpace(rep.Answer) == "" {
		return rep, errors.New("finish needs a non-empty answer")
	}
	return rep, nil
}

// finishFailure answers a finish call the model got wrong, so it can call it again.
func finishFailure(err error) protocol.ToolReply {
	return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrBadArgs, Error: err.Error()}}
}

// reported ends the step the way the model reported it.
func (r *run) reported(res protocol.StepResult, turn int, rep finishReport, skipped int) protocol.StepResult {
	attrs := map[string]string{"accomplished": strconv.FormatBool(*rep.Accomplished)}
	if skipped > 0 {
		attrs["calls_not_run"] = strconv.Itoa(skipped)
	}
	r.e.emit(r.step, protocol.Event{Type: protocol.EvDecision, Role: protocol.RoleExecutor, Turn: turn, Text: "finish", Reason: rep.Reason, Attrs: attrs})
	answer := strings.TrimSpace(rep.Answer)
	if !*rep.Accomplished {
		reason := "the model reports the task was not accomplished"
		if rep.Reason != "" {
			reason += ": " + strings.TrimSpace(rep.Reason)
		}
		return r.finish(res, turn, protocol.OutcomeNotAccomplished, answer, reason)
	}
	outcome := protocol.OutcomeSuccess
	if r.toolFail {
		outcome = protocol.OutcomeSuccessWithRecovery
	}
	return r.finish(res, turn, outcome, answer, "")
}

// askFinishText is the message that asks a model which answered in plain text after a tool
// failure to report through finish.
const askFinishText = "A tool failed during this task and you answered in plain text. Report the outcome now by " +
	"calling finish: accomplished true only if the task was actually done despite the failure, false if it was not " +
	"(say why in reason), with your final answer in answer."

// unreportedReason is the reason of a step whose model answered in plain text after a tool
// failure and did not report through finish when asked.
const unreportedReason = "a tool failed and the model answered in plain text without reporting through finish " +
	"that the task was accomplished"

// askFinish asks the model, once, to report through finish.
func (r *run) askFinish(turn int) {
	r.askedFinish = true
	r.e.emit(r.step, protocol.Event{Type: protocol.EvDecision, Role: protocol.RoleExecutor, Turn: turn,
		Text: "asking the model to report through finish", Reason: "plain-text answer after a tool failure"})
	r.msgs = append(r.msgs, llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: askFinishText}}})
}
