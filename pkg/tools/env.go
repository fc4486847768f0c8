package tools

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
