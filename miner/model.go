package miner

import (
	"log/slog"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm"
)

// newModel builds the compression model.
func newModel(cfg config.LLM, log *slog.Logger) (llm.Backend, error) {
	return llm.New(cfg, llm.WithLogger(log))
}
