package core

import (
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/skein-mesh/skein/pkg/config"
)

// DefaultKeyEnv is the environment variable holding a provider's key when llm.api_key_env is
// empty ("" for providers that need none).
func DefaultKeyEnv(provider string) string {
	switch provider {
	case "anthropic":
		return "ANTHROPIC_API_KEY"
	case "openai":
		return "OPENAI_API_KEY"
	}
	return ""
}

// KeyEnv is the environment variable a binding reads its key from.
func KeyEnv(cfg config.LLM) string {
	if cfg.APIKeyEnv != "" {
		return cfg.APIKeyEnv
	}
	return DefaultKeyEnv(cfg.Provider)
}

// CheckKey fails fast, with one line naming the variable and how to set it, when a binding's
// API key is missing. The scripted model needs no key; an openai binding whose base_url is a
// loopback address (Ollama, vLLM, llama.cpp on this machine) may run without one. It lives here,
// beside KeyEnv, rather than in package llm so that pkg/service, which every role links, checks
// keys without linking the provider SDKs that package llm's factory builds.
func CheckKey(cfg config.LLM) error {
	switch cfg.Provider {
	case "scripted":
		return nil
	case "anthropic", "openai":
	default:
		return fmt.Errorf("llm.provider %q is not one of anthropic, openai, scripted", cfg.Provider)
	}
	env := KeyEnv(cfg)
	if os.Getenv(env) != "" {
		return nil
	}
	if cfg.Provider == "openai" && IsLoopback(cfg.BaseURL) {
		return nil
	}
	return fmt.Errorf("%s is not set: export %s=... or set llm.api_key_env in agent.yaml", env, env)
}

// IsLoopback reports whether a base URL points at this machine.
func IsLoopback(baseURL string) bool {
	if baseURL == "" {
		return false
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
