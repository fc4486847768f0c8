package core

import (
	"net"
	"net/url"

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
