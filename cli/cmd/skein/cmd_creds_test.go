package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/auth"
)

// `skein creds --dir DIR` makes everything deploy/ needs and ships nothing: a seed per identity
// and the gateways' shared HTTP token, each 0600; stdout (the NATS servers' environment) holds
// public keys only, never the token.
func TestCredsWritesTheGatewaysHTTPToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	var stdout, stderr bytes.Buffer
	cmd := newCredsCmd()
	cmd.SetArgs([]string{"--dir", dir})
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, gateway.HTTPTokenEnvFile)
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatalf("no HTTP token for the gateways: %v", err)
	}
	tok, ok := strings.CutPrefix(strings.TrimSpace(string(b)), gateway.HTTPTokenEnv+"=")
	if !ok || len(tok) < 32 {
		t.Fatalf("%s holds %q", tokenFile, b)
	}
	for _, id := range auth.Identities {
		if _, err := auth.Load(auth.File(dir, id)); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if st, err := os.Stat(tokenFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v (%v), want 0600", tokenFile, st.Mode().Perm(), err)
	}
	if strings.Contains(stdout.String(), tok) || strings.Count(stdout.String(), "\n") != len(auth.Identities) {
		t.Errorf("stdout is the NATS servers' environment and must hold only the public keys:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), tokenFile) {
		t.Errorf("stderr does not say where the token is: %q", stderr.String())
	}
}
