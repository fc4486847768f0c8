package executor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
	"github.com/skein-mesh/skein/pkg/toon"
)

// toonNote tells the model how to read tool results; it is sent only when results are TOON.
const toonNote = "Tool results are written in TOON (Token-Oriented Object Notation): YAML-like indentation for objects; " +
	"`key[N]: a,b,c` is an array of N values; `key[N]{f1,f2}:` is followed by N rows, one per line, of comma-separated values " +
	"for fields f1,f2; `- ` starts a list item; strings are quoted only when needed."

// finishNote asks the model to end every task through finish. It is the same for every task, so
// it sits in the stable (cached) block; the finish tool's own description says the same.
const finishNote = "End every task by calling the finish tool, alone: accomplished true only if the task was actually done, " +
	"false when a required action failed or you had to give up (say why in reason), with your final answer in answer. " +
	"Do not end with a plain-text answer."

// buildPrompt lays out the prompt for caching: the stable part (identity, policies, the agent's
// standing profile, format note)
// and the strategic guidelines are system blocks, each ending a cache breakpoint; the task, the
// tactical guidelines and the recalled experience (a mature skill's procedure, worked examples:
// retrieve.RenderExamples), which change per task, go in the first user message, so they never
// touch the cached prefix.
func buildPrompt(cfg *config.Config, profile string, step protocol.Step, guides []protocol.Guideline, experience string, cache bool) ([]llm.SystemBlock, []llm.Message) {
	var stable strings.Builder
	stable.WriteString(strings.TrimSpace(cfg.Agent.SystemPrompt))
	for _, p := range cfg.Agent.Policies {
		stable.WriteString("\n- ")
		stable.WriteString(strings.TrimSpace(p))
	}
	if profile = strings.TrimSpace(profile); profile != "" {
		stable.WriteString("\n\n")
		stable.WriteString(profile)
	}
	stable.WriteString("\n\n")
	stable.WriteString(finishNote)
	if cfg.Tools.ResultFormat != "json" {
		stable.WriteString("\n\n")
		stable.WriteString(toonNote)
	}
	system := []llm.SystemBlock{{Text: stable.String(), Cache: cache}}
	// Strategic guidelines change rarely: they get their own cached block after the stable part.
	// Tactical ones change per task, so they travel with the task.
	strategic, tactical := retrieve.Render(guides)
	if strategic != "" {
		system = append(system, llm.SystemBlock{Text: strategic, Cache: cache})
	}

	var user strings.Builder
	user.WriteString(step.Task)
	if step.Instruction != "" {
		fmt.Fprintf(&user, "\n\nYour part of the plan: %s", step.Instruction)
	}
	for _, c := range step.Context {
		fmt.Fprintf(&user, "\n\nResult of step %s:\n%s", c.StepID, c.Text)
	}
	if tactical != "" {
		user.WriteString("\n\n")
		user.WriteString(tactical)
	}
	if experience != "" {
		user.WriteString("\n\n")
		user.WriteString(experience)
	}
	msgs := []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: user.String()}}}}
	return system, msgs
}

// renderResult is what the model reads of a tool result: the result itself on success, the error
// facts on failure, in TOON or JSON. The trace always keeps the raw JSON.
func renderResult(tr protocol.ToolResult, format string) string {
	return formatPayload(modelPayload(tr), format)
}

// modelPayload is the compact JSON of what the model reads of a result.
func modelPayload(tr protocol.ToolResult) []byte {
	var payload []byte
	if tr.OK {
		payload = tr.Result
		if len(bytes.TrimSpace(payload)) == 0 {
			payload = []byte(`{"ok":true}`)
		}
	} else {
		payload, _ = json.Marshal(struct {
			Error  string `json:"error"`
			Kind   string `json:"kind,omitempty"`
			Stderr string `json:"stderr,omitempty"`
		}{tr.Error, tr.Kind, tr.Stderr})
	}
	if tr.Truncated {
		payload, _ = json.Marshal(map[string]json.RawMessage{"truncated": json.RawMessage("true"), "result": payload})
	}
	// The model reads compact JSON: a tool's indentation is tokens that say nothing.
	var compact bytes.Buffer
	if json.Compact(&compact, payload) == nil {
		payload = compact.Bytes()
	}
	return payload
}

// maxTOONGrowth bounds a result's TOON to this many times its compact JSON: TOON saves tokens
// on tables and loses on deep nesting, where its indentation grows with depth times values
// (a few kilobytes of nested arrays are megabytes of TOON), so past it the model reads JSON.
const maxTOONGrowth = 2

// formatPayload writes a compact JSON payload in the result format: TOON, JSON, or auto
// (whichever is fewer tokens). Its work and output are linear in the payload.
func formatPayload(payload []byte, format string) string {
	if format == "json" {
		return string(payload)
	}
	v, err := toon.ParseJSON(bytes.NewReader(payload))
	if err != nil {
		return string(payload)
	}
	out, err := toon.Encode(v, toon.EncodeOptions{MaxBytes: maxTOONGrowth*len(payload) + 64})
	if err != nil {
		return string(payload)
	}
	// auto: TOON wins on uniform data (tables, listings, logs) and loses on irregular nesting,
	// so each result goes in whichever form is fewer tokens.
	if format == "auto" && tokenize.Count(string(payload)) <= tokenize.Count(string(out)) {
		return string(payload)
	}
	return string(out)
}
