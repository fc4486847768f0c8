package llm

import (
	"fmt"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm/anthropic"
	"github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/llm/openai"
	"github.com/skein-mesh/skein/pkg/llm/scripted"
)

// New builds the backend named by cfg.Provider.
func New(cfg config.LLM, opts ...Option) (Backend, error) {
	var (
		b   Backend
		err error
	)
	// Each case assigns through a typed variable so a failed constructor never yields a
	// non-nil interface holding a nil pointer.
	switch cfg.Provider {
	case anthropic.Provider:
		var x *anthropic.Backend
		if x, err = anthropic.New(cfg, opts...); err == nil {
			b = x
		}
	case openai.Provider:
		var x *openai.Backend
		if x, err = openai.New(cfg, opts...); err == nil {
			b = x
		}
	case scripted.Provider:
		var x *scripted.Backend
		if x, err = scripted.New(cfg, opts...); err == nil {
			b = x
		}
	default:
		return nil, fmt.Errorf("llm.provider %q is not one of anthropic, openai, scripted", cfg.Provider)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// DefaultKeyEnv is the environment variable holding a provider's key when llm.api_key_env is
// empty ("" for providers that need none).
func DefaultKeyEnv(provider string) string { return core.DefaultKeyEnv(provider) }

// KeyEnv is the environment variable a binding reads its key from.
func KeyEnv(cfg config.LLM) string { return core.KeyEnv(cfg) }

// CheckKey fails fast, with one line naming the variable and how to set it, when a binding's
// API key is missing (see core.CheckKey).
func CheckKey(cfg config.LLM) error { return core.CheckKey(cfg) }
