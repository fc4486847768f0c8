package tools

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// BaseEnv is the only part of the host's environment every tool gets. Anything else, provider
// keys above all, reaches a tool only when its manifest names the variable in `env`.
var BaseEnv = []string{"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ"}

// fallbackPATH is given to tools when the host itself has no PATH, so interpreters still resolve.
const fallbackPATH = "/usr/local/bin:/usr/bin:/bin"

// scrubbedEnv builds a tool's environment from lookup (the host's environment).
func scrubbedEnv(lookup func(string) (string, bool), allowed []string) []string {
	env := make([]string, 0, len(BaseEnv)+len(allowed))
	seen := map[string]bool{}
	add := func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		if v, ok := lookup(name); ok {
			env = append(env, name+"="+v)
		} else if name == "PATH" {
			env = append(env, "PATH="+fallbackPATH)
		}
	}
	for _, n := range BaseEnv {
		add(n)
	}
	for _, n := range allowed {
		add(n)
	}
	return env
}

// lookPath finds the program to start: an absolute path must be an executable file; a bare
// name is searched on the host's PATH (the same PATH the tool is given).
func lookPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		found, err := exec.LookPath(p)
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return "", fmt.Errorf("program %q not found on PATH", p)
			}
			return "", err
		}
		return found, nil
	}
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("program %s does not exist (is it built?)", p)
		}
		return "", err
	}
	if st.IsDir() {
		return "", fmt.Errorf("program %s is a directory", p)
	}
	if st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("program %s is not executable (chmod +x it, or run it through an interpreter in command)", p)
	}
	return p, nil
}

// envValue is name's value in env ("" if absent).
func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// reachablePATH keeps the PATH folders uid/gid can search: a tool running as another user than
// the host (nobody, when the host is root) would fail on the others, e.g. an interpreter shim
// under root's home, and an interpreter found there would not run for it anyway.
// resolveAs is reachablePATH and then lookPathAs, remembered for resolveTTL: both walk every
// folder of PATH and of the program with stat calls, which need not happen on every call of a
// tool. They only make a clear error before the start; the kernel enforces access at the exec,
// so a change within the TTL still fails the call, with the exec's error.
func resolveAs(argv []string, pathList string, uid, gid int) (reachable, program string, err error) {
	key := fmt.Sprintf("%d:%d\x00%s\x00%s", uid, gid, pathList, strings.Join(argv, "\x00"))
	resolved.Lock()
	defer resolved.Unlock()
	if r, ok := resolved.m[key]; ok && time.Since(r.at) < resolveTTL {
		return r.reachable, r.program, r.err
	}
	reachable = reachablePATH(pathList, uid, gid)
	program, err = lookPathAs(argv, reachable, uid, gid)
	if resolved.m == nil || len(resolved.m) >= resolveMax {
		resolved.m = map[string]resolution{}
	}
	resolved.m[key] = resolution{at: time.Now(), reachable: reachable, program: program, err: err}
	return reachable, program, err
}

// resolveTTL is how long resolveAs trusts what it found; resolveMax bounds what it keeps (a
// toolhost serves a fixed set of tools, so the map is emptied only by something unusual).
const (
	resolveTTL = 10 * time.Second
	resolveMax = 1024
)

type resolution struct {
	at                 time.Time
	reachable, program string
	err                error
}

var resolved struct {
	sync.Mutex
	m map[string]resolution
}

func reachablePATH(path string, uid, gid int) string {
	var keep []string
	for _, d := range filepath.SplitList(path) {
		if d != "" && filepath.IsAbs(d) && accessibleBy(filepath.Join(d, "."), uid, gid, true) {
			keep = append(keep, d)
		}
	}
	if len(keep) == 0 {
		return fallbackPATH
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// lookPathAs is lookPath for a tool that runs as uid/gid: the program is searched on the tool's
// own PATH, and the program and any script named in argv must be readable by that user, so the
// error says what to fix instead of a bare "permission denied".
func lookPathAs(argv []string, pathList string, uid, gid int) (string, error) {
	fix := fmt.Sprintf("tools run as uid %d, not as the host's user: make it and its folders readable by that user (by all users, for the uids of tools.sandbox.uids), or set tools.sandbox.run_as", uid)
	p := argv[0]
	if !filepath.IsAbs(p) {
		found := ""
		for _, d := range filepath.SplitList(pathList) {
			c := filepath.Join(d, p)
			if st, err := os.Stat(c); err == nil && !st.IsDir() && st.Mode().Perm()&0o111 != 0 && accessibleBy(c, uid, gid, true) {
				found = c
				break
			}
		}
		if found == "" {
			return "", fmt.Errorf("program %q not found on the PATH of uid %d (%s)", p, uid, pathList)
		}
		p = found
	} else if _, err := lookPath(p); err != nil {
		return "", err
	} else if !accessibleBy(p, uid, gid, true) {
		return "", fmt.Errorf("program %s cannot be run by uid %d (%s)", p, uid, fix)
	}
	for _, a := range argv[1:] {
		if !filepath.IsAbs(a) {
			continue
		}
		if st, err := os.Stat(a); err == nil && !st.IsDir() && !accessibleBy(a, uid, gid, false) {
			return "", fmt.Errorf("%s cannot be read by uid %d (%s)", a, uid, fix)
		}
	}
	return p, nil
}
