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

// MarkdownTable renders the matrix as the table docs/security.md shows (a test keeps them equal).
func MarkdownTable(n protocol.Names) string {
	var b strings.Builder
	cols := Identities[:len(Identities)-1] // admin may do anything
	b.WriteString("| resource | what |")
	for _, id := range cols {
		fmt.Fprintf(&b, " %s |", id)
	}
	b.WriteString("\n|---|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range Matrix {
		name := ""
		switch r.Kind {
		case KindSubject:
			name = "`" + r.Subject(n) + "`"
		case KindStream:
			name = "stream `" + n.Stream(r.Base) + "`"
		case KindBucket:
			name = "KV `" + n.Bucket(r.Base) + "`"
		case KindObjectStore:
			name = "objects `" + n.Bucket(r.Base) + "`"
		}
		fmt.Fprintf(&b, "| %s | %s |", name, r.Doc)
		for _, id := range cols {
			a := r.Grants[id].String()
			if a == "" {
				a = "·"
			}
			fmt.Fprintf(&b, " %s |", a)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nDurable consumers (only the owner may pull from, ack, replace or delete them):\n\n| stream | consumer | owner |\n|---|---|---|\n")
	for _, d := range Durables {
		name := d.Name
		if name == "*" {
			name = "any (`executor-<agent>`)"
		} else {
			name = "`" + name + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", n.Stream(d.Stream), name, d.Owner)
	}
	return b.String()
}
