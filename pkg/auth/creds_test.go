package auth_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
)

func TestEnsureWritesPrivateFilesOnceAndKeepsThem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	first, err := auth.Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("creds folder mode %v (%v), want 0700", st.Mode().Perm(), err)
	}
	seen := map[string]bool{}
	for _, id := range auth.Identities {
		p := auth.File(dir, id)
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v (%v), want 0600", p, st.Mode().Perm(), err)
		}
		k, err := auth.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if k.Identity != id || k.Public != first[id] || !strings.HasPrefix(k.Public, "U") {
			t.Errorf("%s: loaded %+v, want identity %s key %s", p, k, id, first[id])
		}
		if seen[k.Public] {
			t.Errorf("two identities share the key %s", k.Public)
		}
		seen[k.Public] = true
	}
	again, err := auth.Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	for id, k := range first {
		if again[id] != k {
			t.Errorf("restart changed %s's key", id)
		}
	}
	// A file others can read is refused with the fix.
	p := auth.File(dir, auth.Client)
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Load(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable credentials: %v", err)
	}
	// A folder made too open is closed again.
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Ensure(dir); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("creds folder left at %v", st.Mode().Perm())
	}
}

func TestResolveOrder(t *testing.T) {
	home := t.TempDir()
	if _, err := auth.Ensure(auth.Dir(home)); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	src := auth.Source{Home: home, Env: get}
	if got, want := auth.Resolve(auth.Executor, src), auth.File(auth.Dir(home), auth.Executor); got != want {
		t.Errorf("home: got %q want %q", got, want)
	}
	src.Config = "/cfg.nk"
	if got := auth.Resolve(auth.Executor, src); got != "/cfg.nk" {
		t.Errorf("config: got %q", got)
	}
	env["SKEIN_CREDS"] = "/env.nk"
	if got := auth.Resolve(auth.Executor, src); got != "/env.nk" {
		t.Errorf("env: got %q", got)
	}
	src.Flag = "/flag.nk"
	if got := auth.Resolve(auth.Executor, src); got != "/flag.nk" {
		t.Errorf("flag: got %q", got)
	}
	if got := auth.Resolve(auth.Executor, auth.Source{Home: t.TempDir(), Env: func(string) string { return "" }}); got != "" {
		t.Errorf("nothing anywhere: got %q", got)
	}
}

// A credentials file is the seed alone, as `nk -gen user` writes it, so NATS clients that read
// nothing else (nats-py's nkeys_seed, the nats CLI's --nkey) take it as it is; the identity is
// the file's name. Files with the comment lines older versions wrote above the seed still load,
// with the identity their header names, whatever the file is called.
func TestCredentialsFilesAreTheSeedAloneAndOldFilesStillLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	pub, err := auth.Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	seedLine := regexp.MustCompile(`^SU[A-Z2-7]{56}\n$`)
	for _, id := range auth.Identities {
		data, err := os.ReadFile(auth.File(dir, id))
		if err != nil {
			t.Fatal(err)
		}
		if !seedLine.Match(data) {
			t.Errorf("%s.nk holds %d bytes that are not one seed line", id, len(data))
		}
	}

	seed, err := os.ReadFile(auth.File(dir, auth.Client))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := write("mine.nk", "# skein identity: client\n# public key: "+pub[auth.Client]+
		"\n# Keep this file private. A process uses it with --creds FILE, $SKEIN_CREDS or mesh.creds_file.\n"+string(seed))
	for _, c := range []struct {
		path string
		want auth.Identity
	}{
		{old, auth.Client},
		{write("client.nk", string(seed)), auth.Client},
		{write("admin.nk", string(seed)), auth.Admin}, // the name is all a seed file says
		{write("mine.nk", string(seed)), ""},
		{write("client.seed", string(seed)), ""},
	} {
		k, err := auth.Load(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if k.Identity != c.want || k.Public != pub[auth.Client] {
			t.Errorf("%s: identity %q key %s, want %q %s", filepath.Base(c.path), k.Identity, k.Public, c.want, pub[auth.Client])
		}
	}
}

// A seed file whose name names no identity gets the identity of the process that uses it
// (bus.WithIdentity, which every role and the CLI set), so its replies come back on the inbox
// prefix its permissions allow; without it they could not.
func TestASeedFileUnderAnotherNameConnectsAsTheCallersIdentity(t *testing.T) {
	m := startMesh(t)
	seed, err := os.ReadFile(auth.File(m.creds, auth.Client))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "laptop.key")
	if err := os.WriteFile(path, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	accountInfo := func(opts ...bus.Option) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := bus.Connect(ctx, m.url, "renamed", 5*time.Second, append([]bus.Option{bus.WithCreds(path)}, opts...)...)
		if err != nil {
			return err
		}
		defer c.Close()
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		defer qcancel()
		_, err = c.JS.AccountInfo(qctx)
		return err
	}
	if err := accountInfo(bus.WithIdentity(auth.Client)); err != nil {
		t.Errorf("renamed client seed with WithIdentity(client): %v", err)
	}
	if err := accountInfo(); err == nil {
		t.Error("renamed client seed without an identity got a JetStream reply: the inbox prefix should have been refused (the test proves nothing)")
	}
}
