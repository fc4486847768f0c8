package auth

import (
	"fmt"
	"strings"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// EnvKey is the environment variable a nats-server running RenderConf's output reads an
// identity's public key from (`skein creds` prints them).
func EnvKey(id Identity) string { return "SKEIN_NKEY_" + strings.ToUpper(string(id)) }

// RenderConf renders the matrix as a nats-server configuration fragment: one nkey user per
// identity with its permissions, the public keys taken from the environment (EnvKey), so the
// file holds no secret and the same file serves every deployment. deploy/nats/auth.conf is this
// output for the default namespace; a test keeps them equal.
func RenderConf(n protocol.Names) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The skein permission matrix (pkg/auth) for namespace %q, rendered by `skein creds conf`.\n", n.NS)
	b.WriteString("# Do not edit: change pkg/auth and render again. Public keys come from the environment\n")
	b.WriteString("# (`skein creds --dir DIR` writes the credentials and prints the SKEIN_NKEY_* lines).\n")
	b.WriteString("# Anonymous connections are refused: every client is one of these users.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, id := range Identities {
		p := For(id, n)
		fmt.Fprintf(&b, "    # %s\n    {\n      nkey: $%s\n      permissions: {\n", id, EnvKey(id))
		b.WriteString("        publish: {\n")
		list(&b, "allow", p.PubAllow)
		list(&b, "deny", p.PubDeny)
		b.WriteString("        }\n        subscribe: {\n")
		list(&b, "allow", p.SubAllow)
		b.WriteString("        }\n")
		if p.Responses {
			fmt.Fprintf(&b, "        allow_responses: {max: 1, expires: %q}\n", ResponseTTL.String())
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func list(b *strings.Builder, key string, subjects []string) {
	if len(subjects) == 0 {
		return
	}
	fmt.Fprintf(b, "          %s: [\n", key)
	for _, s := range subjects {
		fmt.Fprintf(b, "            %q\n", s)
	}
	b.WriteString("          ]\n")
}
