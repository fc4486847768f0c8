package auth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"
)

// Credentials are nkeys: each identity holds an ed25519 seed and the server holds only the
// public keys. A connection proves its identity by signing the server's nonce, so nothing that
// could be replayed ever crosses the wire (unlike a password), the server's configuration holds
// no secret, and the files are the ones the nats CLI, nats-py and nsc already know: a file holds
// the seed alone, on one line, as `nk -gen user` writes it (nats-py reads nothing else).

// identityHeader is the first line of the credentials files older versions wrote (three comment
// lines above the seed). Such files are still read; the identity they name wins over the name
// of the file.
const identityHeader = "# skein identity: "

// File is the credentials file of id in dir.
func File(dir string, id Identity) string { return filepath.Join(dir, string(id)+".nk") }

// Dir is where a mesh home keeps its credentials.
func Dir(home string) string { return filepath.Join(home, "creds") }

// Ensure creates dir (0700) and a credentials file (0600) for every identity that has none, and
// returns every identity's public key. Existing files are kept, so restarting a mesh keeps the
// identities every joined process holds.
func Ensure(dir string) (map[Identity]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials folder %s: %w", dir, err)
	}
	// MkdirAll keeps the mode of a folder that already exists; a folder of secrets must not be
	// readable by others whoever made it.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials folder %s: %w", dir, err)
	}
	pub := map[Identity]string{}
	for _, id := range Identities {
		p := File(dir, id)
		k, err := Load(p)
		if errors.Is(err, os.ErrNotExist) {
			k, err = generate(p, id)
		}
		if err != nil {
			return nil, err
		}
		pub[id] = k.Public
	}
	return pub, nil
}

func generate(path string, id Identity) (*Key, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("generate %s credentials: %w", id, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	pk, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	// The seed alone: the identity is the file's name (<identity>.nk), so nothing else is needed
	// and every NATS client reads the file as it is.
	body := string(seed) + "\n"
	// O_EXCL: two meshes starting on one home must not write two different keys for one identity.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return Load(path)
		}
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.WriteString(body); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &Key{Identity: id, Public: pk, Path: path}, nil
}

// Key is what a credentials file holds, without the seed.
type Key struct {
	// Identity is the skein identity of the file: the one an older file's header names, else
	// the one its name is (<identity>.nk); "" when neither says.
	Identity Identity
	Public   string
	Path     string
	// JWT is true for a NATS user credentials file (JWT plus seed, decentralized auth).
	JWT bool
}

// Load reads a credentials file: an nkey seed file (what skein writes, `nk -gen user`; older
// skein files with comment lines above the seed too) or a NATS user .creds file (JWT and seed,
// from nsc). It refuses a file others can read.
func Load(path string) (*Key, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("credentials file %s is readable by others (mode %04o): run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k := &Key{Path: path, JWT: bytes.Contains(data, []byte("BEGIN NATS USER JWT"))}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if id, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), identityHeader); ok {
			k.Identity = Identity(strings.TrimSpace(id))
			break
		}
	}
	if k.Identity == "" {
		k.Identity = identityOfFile(path)
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: no nkey seed in it: %w", path, err)
	}
	defer kp.Wipe()
	if k.Public, err = kp.PublicKey(); err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	return k, nil
}

// identityOfFile is the identity a credentials file's name is (<identity>.nk), or "".
func identityOfFile(path string) Identity {
	name, ok := strings.CutSuffix(filepath.Base(path), ".nk")
	if id := Identity(name); ok && id.Valid() {
		return id
	}
	return ""
}

// Source is where a process looks for its credentials, first match wins.
type Source struct {
	Flag   string // --creds
	Config string // mesh.creds_file
	Home   string // $SKEIN_HOME: its creds/<identity>.nk
	Env    func(string) string
}

// Resolve returns the credentials file a process should use for identity id: --creds, then
// $SKEIN_CREDS, then mesh.creds_file, then $SKEIN_CREDS_DIR/<id>.nk, then
// $SKEIN_HOME/creds/<id>.nk when it exists. "" means none was found.
func Resolve(id Identity, s Source) string {
	env := s.Env
	if env == nil {
		env = os.Getenv
	}
	for _, p := range []string{s.Flag, env("SKEIN_CREDS"), s.Config} {
		if p != "" {
			return p
		}
	}
	var dirs []string
	if d := env("SKEIN_CREDS_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	if s.Home != "" {
		dirs = append(dirs, Dir(s.Home))
	}
	for _, d := range dirs {
		if p := File(d, id); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
