package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/auth"
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
