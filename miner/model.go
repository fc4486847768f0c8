package miner

import (
	"errors"
	"log/slog"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm"
)

// newModel builds the compression model.
// TODO: llm.New(cfg, llm.WithLogger(log)) once pkg/llm/factory.go lands.
func newModel(cfg config.LLM, log *slog.Logger) (llm.Backend, error) {
	_, _ = cfg, log
	return nil, errors.New("no model factory in this build")
}
