package auth_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestDeployConfMatchesMatrix: deploy/nats/auth.conf is the matrix's rendering, and every node's
// configuration, read by nats-server's own parser, gives each identity exactly the permissions
// the embedded server gives it.
func TestDeployConfMatchesMatrix(t *testing.T) {
	root := devtest.RepoRoot(t)
	names := protocol.NewNames("")
	got, err := os.ReadFile(filepath.Join(root, "deploy", "nats", "auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != auth.RenderConf(names) {
		t.Fatal("deploy/nats/auth.conf is not the matrix's rendering: run `skein creds conf > deploy/nats/auth.conf`")
	}
	pub, err := auth.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range auth.Identities {
		t.Setenv(auth.EnvKey(id), pub[id])
	}
	want, err := embedded.Users(pub, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"nats-1.conf", "nats-2.conf", "nats-3.conf"} {
		opts, err := server.ProcessConfigFile(filepath.Join(root, "deploy", "nats", node))
		if err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		if len(opts.Nkeys) != len(want) {
			t.Fatalf("%s: %d nkey users, want %d", node, len(opts.Nkeys), len(want))
		}
		for i, u := range opts.Nkeys {
			w := want[i]
			if u.Nkey != w.Nkey {
				t.Errorf("%s: user %d is %s, want %s", node, i, u.Nkey, w.Nkey)
				continue
			}
			if !samePerms(u.Permissions, w.Permissions) {
				t.Errorf("%s: %s's permissions differ from the embedded server's:\nconf     %+v %+v %+v\nembedded %+v %+v %+v", node, auth.Identities[i],
					u.Permissions.Publish, u.Permissions.Subscribe, u.Permissions.Response, w.Permissions.Publish, w.Permissions.Subscribe, w.Permissions.Response)
			}
		}
	}
}

func samePerms(a, b *server.Permissions) bool {
	norm := func(p *server.SubjectPermission) [2][]string {
		if p == nil {
			return [2][]string{}
		}
		x, y := slices.Clone(p.Allow), slices.Clone(p.Deny)
		slices.Sort(x)
		slices.Sort(y)
		if len(x) == 0 {
			x = nil
		}
		if len(y) == 0 {
			y = nil
		}
		return [2][]string{x, y}
	}
	return reflect.DeepEqual(norm(a.Publish), norm(b.Publish)) && reflect.DeepEqual(norm(a.Subscribe), norm(b.Subscribe)) &&
		reflect.DeepEqual(a.Response, b.Response)
}

// TestDocsShowTheMatrix: docs/security.md shows the matrix the server enforces.
func TestDocsShowTheMatrix(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(devtest.RepoRoot(t), "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), auth.MarkdownTable(protocol.NewNames(""))) {
		t.Fatal("docs/security.md does not show the current matrix: paste auth.MarkdownTable's output (go test -run TestDocsShowTheMatrix -v prints it)\n" +
			auth.MarkdownTable(protocol.NewNames("")))
	}
}
