// Package tools is skein's one tool contract: a JSON manifest beside an executable in any
// language, JSON arguments on stdin, JSON on stdout, every outcome normalized to a
// protocol.ToolResult. It loads manifests, validates arguments, runs tools as scrubbed
// subprocesses, and gives executors a client for tools served over NATS.
package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools/limits"
	"github.com/skein-mesh/skein/pkg/tools/schema"
)

// Manifest is a tool's JSON file exactly as an author writes it.
type Manifest struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Command     []string        `json:"command"`
	InputSchema json.RawMessage `json:"input_schema"`
	// TimeoutS is the wall-clock limit of one call; 0 means the host's default.
	TimeoutS float64 `json:"timeout_s,omitempty"`
	// Env names the variables of the host's environment the tool may see, beyond the base set.
	Env []string `json:"env,omitempty"`
	// MaxOutputBytes caps stdout; 0 means the host's default.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// CallIDArg, when set, is the argument field the call's id is written into (after the
	// schema check), for tools that take an idempotency key as an argument. The id is always in
	// the environment variable SKEIN_CALL_ID as well.
	CallIDArg string `json:"call_id_arg,omitempty"`
	// Sandbox overrides the host's resource limits and says where the tool runs (nil: defaults).
	Sandbox *ManifestSandbox `json:"sandbox,omitempty"`
}

// maxManifestBytes bounds a manifest file (limits holds the ceilings of its values).
const maxManifestBytes = 1 << 20

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Tool is a loaded, validated manifest ready to run.
type Tool struct {
	Manifest
	// Path is the manifest file; Dir is its folder, where the tool runs and relative paths resolve.
	Path string
	Dir  string
	// Argv is Command with relative paths resolved against Dir. Argv[0] is either an absolute
	// path or a bare name looked up on PATH when the tool starts.
	Argv []string

	schema *schema.Schema
}

// Spec is what a model is shown of the tool.
func (t *Tool) Spec() protocol.ToolSpec {
	return protocol.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, TimeoutS: t.TimeoutS}
}

// ValidateArgs checks args (a JSON object; empty means {}) against the tool's input_schema.
func (t *Tool) ValidateArgs(args json.RawMessage) error {
	if t.schema == nil {
		return errors.New("tool has no compiled input_schema (not loaded with LoadFile)")
	}
	return t.schema.Validate(args)
}

// Timeout is the manifest's limit, or def when the manifest leaves it to the host.
func (t *Tool) Timeout(def time.Duration) time.Duration {
	if t.TimeoutS > 0 {
		return time.Duration(t.TimeoutS * float64(time.Second))
	}
	return def
}

// CheckExecutable reports whether the tool's program can be found now. Loading does not require
// it (a Go tool may be built after its manifest is read); a host logs this as a warning.
func (t *Tool) CheckExecutable() error {
	if _, err := lookPath(t.Argv[0]); err != nil {
		return fmt.Errorf("tool %s (%s): %w", t.Name, t.Path, err)
	}
	return nil
}

// FieldError is a problem with one field of one manifest file.
type FieldError struct {
	File  string
	Field string // "" when the file as a whole is wrong (unreadable, not JSON)
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s: field %q: %s", e.File, e.Field, e.Msg)
}

// LoadFile reads and validates one manifest. Every problem found is returned, joined.
func LoadFile(path string) (*Tool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &FieldError{File: path, Msg: err.Error()}
	}
	data, err := readLimited(abs)
	if err != nil {
		return nil, &FieldError{File: path, Msg: err.Error()}
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, decodeError(path, data, err)
	}
	if dec.More() {
		return nil, &FieldError{File: path, Msg: "trailing data after the manifest object"}
	}
	t := &Tool{Manifest: m, Path: abs, Dir: filepath.Dir(abs)}
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, &FieldError{File: path, Field: field, Msg: fmt.Sprintf(format, a...)})
	}
	if err := protocol.IDTool.Check(m.Name); err != nil {
		bad("name", "%v", err)
	} else if protocol.Builtin(m.Name) {
		bad("name", "%q is a built-in tool of the executor; choose another name", m.Name)
	}
	switch d := strings.TrimSpace(m.Description); {
	case d == "":
		bad("description", "is required: the model chooses tools by it")
	case len(d) > protocol.MaxToolDescription:
		bad("description", "is %d bytes, at most %d", len(d), protocol.MaxToolDescription)
	}
	if len(m.Command) == 0 || m.Command[0] == "" {
		bad("command", "is required: an argv list such as [\"python3\", \"./tool.py\"]")
	} else {
		t.Argv = resolveArgv(t.Dir, m.Command)
	}
	if len(bytes.TrimSpace(m.InputSchema)) == 0 || string(bytes.TrimSpace(m.InputSchema)) == "null" {
		bad("input_schema", "is required: a JSON Schema of type object")
	} else if s, err := schema.Compile(m.InputSchema); err != nil {
		bad("input_schema", "%v", err)
	} else {
		t.schema = s
		var compact bytes.Buffer
		if json.Compact(&compact, m.InputSchema) == nil {
			t.InputSchema = compact.Bytes()
		}
	}
	if m.TimeoutS < 0 || m.TimeoutS > limits.MaxTimeoutS {
		bad("timeout_s", "must be between 0 (host default) and %d seconds, got %v", limits.MaxTimeoutS, m.TimeoutS)
	}
	seen := map[string]bool{}
	for i, name := range m.Env {
		if !envNameRE.MatchString(name) {
			bad(fmt.Sprintf("env[%d]", i), "%q is not a variable name", name)
		}
		if seen[name] {
			bad(fmt.Sprintf("env[%d]", i), "%q is listed twice", name)
		}
		seen[name] = true
	}
	if m.CallIDArg != "" && !envNameRE.MatchString(m.CallIDArg) {
		bad("call_id_arg", "must be a field name of letters, digits and '_', got %q", m.CallIDArg)
	}
	if m.MaxOutputBytes < 0 || m.MaxOutputBytes > limits.MaxOutputCeiling {
		bad("max_output_bytes", "must be between 0 (host default) and %d, got %d", limits.MaxOutputCeiling, m.MaxOutputBytes)
	}
	if m.Sandbox != nil {
		for _, msg := range m.Sandbox.check() {
			bad("sandbox", "%s", msg)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxManifestBytes {
		return nil, fmt.Errorf("manifest is %d bytes, at most %d", st.Size(), maxManifestBytes)
	}
	return os.ReadFile(path)
}

// decodeError turns encoding/json's messages into ones that name the file, the field and where.
func decodeError(path string, data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := position(data, syn.Offset)
		return &FieldError{File: path, Msg: fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, syn)}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return &FieldError{File: path, Msg: fmt.Sprintf("must be a JSON object, got %s", typ.Value)}
		}
		return &FieldError{File: path, Field: field, Msg: fmt.Sprintf("wrong type: got %s, want %s", typ.Value, jsonTypeName(typ.Type.Kind().String()))}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &FieldError{File: path, Field: name, Msg: "unknown field (allowed: name, description, command, input_schema, timeout_s, env, max_output_bytes, sandbox)"}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &FieldError{File: path, Msg: "invalid JSON: unexpected end of file"}
	}
	return &FieldError{File: path, Msg: "invalid manifest: " + err.Error()}
}

func jsonTypeName(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice":
		return "array"
	case "float64", "int", "int64":
		return "number"
	case "struct", "map":
		return "object"
	}
	return goKind
}

func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line = 1 + bytes.Count(data[:off], []byte("\n"))
	col = int(off) - bytes.LastIndexByte(data[:off], '\n')
	return line, col
}

// resolveArgv makes relative paths absolute against the manifest folder: command[0] when it
// contains a path separator (./tool, bin/tool), and any later argument starting with ./ or ../.
// Bare names (python3, node) stay as they are and are looked up on PATH.
func resolveArgv(dir string, cmd []string) []string {
	argv := make([]string, len(cmd))
	copy(argv, cmd)
	if p := argv[0]; !filepath.IsAbs(p) && strings.ContainsRune(p, filepath.Separator) {
		argv[0] = filepath.Join(dir, p)
	}
	for i := 1; i < len(argv); i++ {
		if a := argv[i]; strings.HasPrefix(a, "./") || strings.HasPrefix(a, "../") {
			argv[i] = filepath.Join(dir, a)
		}
	}
	return argv
}

// LoadDir loads every *.json file directly inside dir (not its subfolders, which hold tool code
// such as node_modules or a Go module). Files whose names start with "." are skipped.
func LoadDir(dir string) ([]*Tool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("tools manifest dir %s: %w", dir, err)
	}
	var tools []*Tool
	var errs []error
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".json") {
			continue
		}
		t, err := LoadFile(filepath.Join(dir, n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		tools = append(tools, t)
	}
	return tools, errors.Join(errs...)
}

// LoadDirs loads the manifests of every dir and keeps those named in enabled (an allow-list;
// empty keeps all). Any bad manifest, a tool name defined twice, or an enabled name that no
// manifest defines is an error; all of them are reported together. Tools are sorted by name.
func LoadDirs(dirs []string, enabled []string) ([]*Tool, error) {
	var errs []error
	byName := map[string]*Tool{}
	for _, dir := range dirs {
		ts, err := LoadDir(dir)
		if err != nil {
			errs = append(errs, err)
		}
		for _, t := range ts {
			if prev, ok := byName[t.Name]; ok {
				errs = append(errs, fmt.Errorf("tool %q is defined twice: %s and %s", t.Name, prev.Path, t.Path))
				continue
			}
			byName[t.Name] = t
		}
	}
	var out []*Tool
	if len(enabled) == 0 {
		for _, t := range byName {
			out = append(out, t)
		}
	} else {
		seen := map[string]bool{}
		for _, name := range enabled {
			if seen[name] {
				continue
			}
			seen[name] = true
			t, ok := byName[name]
			if !ok {
				errs = append(errs, fmt.Errorf("tools.enabled names %q, but no manifest in %s defines it", name, strings.Join(dirs, ", ")))
				continue
			}
			out = append(out, t)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
