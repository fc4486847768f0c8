package memoryd

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/memory/extract"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// newModel builds the promotion judge's model backend.
func newModel(cfg config.LLM, log *slog.Logger) (llm.Backend, error) {
	return llm.New(cfg, llm.WithLogger(log))
}

// skillWriter asks the judges' model (miner.llm) to write skills; its tokens are logged, since
// they belong to no session.
func skillWriter(m llm.Backend, model string, log *slog.Logger) extract.Ask {
	return func(ctx context.Context, system, user string, maxTokens int) (string, error) {
		resp, err := m.Complete(ctx, llm.Request{Model: model, System: []llm.SystemBlock{{Text: system}},
			Messages:  []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: user}}}},
			MaxTokens: maxTokens, Role: protocol.RoleMemory})
		if err != nil {
			return "", fmt.Errorf("skill writer: %w", err)
		}
		log.Info("skill writer model call", "model", model, "input_tokens", resp.Usage.InputTokens, "output_tokens", resp.Usage.OutputTokens)
		return resp.Text, nil
	}
}
