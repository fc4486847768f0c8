package main

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

	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
)

// Bounds of an eval suite, so a suite file cannot make skein eval run without end.
const (
	maxEvalTasks  = 200
	maxEvalRounds = 50
)

// evalTaskID is what a task's id may be: it names the task in tables and reports.
var evalTaskID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,48}$`)

// evalSuite is a folder of tasks with a check each (docs/eval.md):
//
//	SUITE/suite.yaml   name, description, config (the agent's config, default agent.yaml)
//	SUITE/tasks/*.yaml one task each: id, task, check {answer: REGEX | tool: NAME, args: {...}}, timeout_s
//	SUITE/checks/NAME.json the checking tools (tool manifests, run by skein eval itself, never offered to the agent)
type evalSuite struct {
	Dir         string     `yaml:"-" json:"-"`
	Name        string     `yaml:"name" json:"name"`
	Description string     `yaml:"description" json:"description,omitempty"`
	Config      string     `yaml:"config" json:"-"`
	Tasks       []evalTask `yaml:"-" json:"-"`
}

type evalTask struct {
	ID       string    `yaml:"id"`
	Task     string    `yaml:"task"`
	Check    evalCheck `yaml:"check"`
	TimeoutS float64   `yaml:"timeout_s"`
}

// evalCheck says whether a session did its task: its answer matches Answer (a regular
// expression), or the checking tool Tool (SUITE/checks/Tool.json), run with Args plus
// {"answer", "session"}, answers {"pass": true}.
type evalCheck struct {
	Answer string         `yaml:"answer"`
	Tool   string         `yaml:"tool"`
	Args   map[string]any `yaml:"args"`
	re     *regexp.Regexp
	tool   *tools.Tool
}

func decodeStrict(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// loadSuite reads and checks a suite folder.
func loadSuite(dir string) (*evalSuite, error) {
	s := &evalSuite{Dir: dir}
	if err := decodeStrict(filepath.Join(dir, "suite.yaml"), s); err != nil {
		return nil, fmt.Errorf("eval suite %s: %w (a suite is a folder with suite.yaml and tasks/*.yaml)", dir, err)
	}
	if s.Name == "" {
		s.Name = filepath.Base(dir)
	}
	if s.Config == "" {
		s.Config = "agent.yaml"
	}
	files, err := filepath.Glob(filepath.Join(dir, "tasks", "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("eval suite %s: no tasks/*.yaml", dir)
	}
	if len(files) > maxEvalTasks {
		return nil, fmt.Errorf("eval suite %s: %d tasks, at most %d", dir, len(files), maxEvalTasks)
	}
	seen := map[string]string{}
	for _, f := range files {
		var t evalTask
		if err := decodeStrict(f, &t); err != nil {
			return nil, err
		}
		if err := t.validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if t.Check.Tool != "" {
			tool, err := tools.LoadFile(filepath.Join(dir, "checks", t.Check.Tool+".json"))
			if err != nil {
				return nil, fmt.Errorf("%s: checking tool: %w", f, err)
			}
			t.Check.tool = tool
		}
		if other, dup := seen[t.ID]; dup {
			return nil, fmt.Errorf("%s: task id %q is also %s's", f, t.ID, other)
		}
		seen[t.ID] = f
		s.Tasks = append(s.Tasks, t)
	}
	return s, nil
}

func (t *evalTask) validate() error {
	t.Task = strings.TrimSpace(t.Task)
	switch {
	case !evalTaskID.MatchString(t.ID):
		return fmt.Errorf("id %q must be a short token (letters, digits, '-', '_')", t.ID)
	case t.Task == "":
		return errors.New("task is empty")
	case len(t.Task) > protocol.MaxTaskBytes:
		return fmt.Errorf("task is %d bytes, at most %d", len(t.Task), protocol.MaxTaskBytes)
	case (t.Check.Answer == "") == (t.Check.Tool == ""):
		return errors.New("check needs exactly one of answer (a regular expression) and tool (a checking tool)")
	case t.TimeoutS < 0 || t.TimeoutS > 3600:
		return fmt.Errorf("timeout_s %v must be between 0 and 3600", t.TimeoutS)
	}
	if t.Check.Answer != "" {
		re, err := regexp.Compile(t.Check.Answer)
		if err != nil {
			return fmt.Errorf("check.answer: %w", err)
		}
		t.Check.re = re
	}
	if t.Check.Tool != "" {
		if err := protocol.IDTool.Check(t.Check.Tool); err != nil {
			return fmt.Errorf("check.tool: %w", err)
		}
		if _, err := json.Marshal(t.Check.Args); err != nil {
			return fmt.Errorf("check.args: %w", err)
		}
	}
	return nil
}
