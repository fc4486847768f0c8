package executor

import (
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/usage"
)

// resolveLimits fixes the model's context window and output limit once: llm.context_window when
// set, else the model table (pkg/usage/prices.yaml plus agent.yaml's models:), else a
// conservative window, said once, never a silent guess.
func (e *Executor) resolveLimits() {
	cfg := e.d.Config.ForRole(protocol.RoleExecutor)
	l, known := usage.ModelLimits(cfg.Model)
	e.window, e.maxOut = l.ContextWindow, l.MaxOutput
	switch {
	case cfg.ContextWindow > 0:
		e.window = cfg.ContextWindow
	case !known:
		e.window = usage.ConservativeWindow
		e.d.Logger.Warn("model is not in the model table: assuming a conservative context window; set llm.context_window or add the model under models: in agent.yaml",
			"model", cfg.Model, "context_window", e.window)
	}
	if e.maxOut > 0 && cfg.MaxTokens > e.maxOut {
		e.d.Logger.Warn("llm.max_tokens is above the model's output limit; using the limit", "model", cfg.Model,
			"max_tokens", cfg.MaxTokens, "max_output", e.maxOut)
	}
}

// contextWindow is the window compaction works to.
func (e *Executor) contextWindow() int {
	if e.window > 0 {
		return e.window
	}
	return defaultWindow
}

// maxTokens caps a call's output at the model's limit.
func (e *Executor) maxTokens(want int) int {
	if e.maxOut > 0 && want > e.maxOut {
		return e.maxOut
	}
	return want
}
