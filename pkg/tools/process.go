package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools/schema"
)

// ProcessSpec is a long-lived program a host runs under the tool sandbox and talks to over its
// stdin and stdout, such as an MCP server on stdio: started once, serving many calls.
type ProcessSpec struct {
	// Name names the process in its scratch folder and in errors (letters, digits, '-', '_').
	Name string
	// Command is the argv. A program path with a slash resolves against Dir (or, without Dir,
	// the current folder); a bare name is looked up on PATH, as for a tool.
	Command []string
	// Dir is the working directory ("": the process's scratch folder, which is also its HOME).
	Dir string
	// Env are NAME=value pairs added to the scrubbed base environment (BaseEnv): the process
	// sees nothing else of the host's environment.
	Env []string
	// Limits override the runner's sandbox limits field by field (zero fields: the runner's).
	Limits Limits
	// Tmp and SeccompAllow are as a manifest's sandbox.tmp and sandbox.seccomp_allow.
	Tmp          string
	SeccompAllow []string
}

// Process is a long-lived program started by StartProcess. Its stdin and stdout are the
// caller's to use; its stderr is kept (the last StderrTail bytes) for error messages. Stop ends
// it with every process it started.
type Process struct {
	// Stdin writes to the program; Stdout reads what it prints.
	Stdin  io.WriteCloser
	Stdout io.ReadCloser

	cmd      *exec.Cmd
	conf     *callConf
	prepared *Prepared
	errR     *os.File
	stderr   lockedTail
	exited   chan struct{}
	reads    sync.WaitGroup
	stopOnce sync.Once
}

// StartProcess starts spec's program as a tool call starts, with everything a call gets from
// the runner's sandbox (its own user, resource limits from the first instruction, its own process
// group and cgroup, the parent-death signal, a scrubbed environment, a scratch folder as HOME),
// but with no time limit and its stdin and stdout left open to the caller. The limits count over
// the process's whole life: CPU time (cpu_s) adds up across everything it serves.
func (r *Runner) StartProcess(spec ProcessSpec) (*Process, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, errors.New("no command to start")
	}
	if err := protocol.IDTool.Check(spec.Name); err != nil {
		return nil, fmt.Errorf("process name: %w", err)
	}
	// A process has no arguments of its own; "{}" passes the schema, the rest of a call's
	// preparation (program, environment, scratch folder) applies as it is.
	anything, err := schema.Compile(json.RawMessage(`{"type":"object"}`))
	if err != nil {
		return nil, err
	}
	dir := spec.Dir
	sb := &ManifestSandbox{Limits: spec.Limits, Tmp: spec.Tmp, SeccompAllow: spec.SeccompAllow}
	if dir != "" {
		sb.Workdir = "tool"
	} else if dir, err = os.Getwd(); err != nil {
		return nil, err
	}
	t := &Tool{Manifest: Manifest{Name: spec.Name, Command: spec.Command, Sandbox: sb}, Dir: dir,
		Argv: resolveArgv(dir, spec.Command), schema: anything}
	c := r.Prepare(context.Background(), t, nil)
	if c.failed != nil {
		c.Close()
		return nil, errors.New(c.failed.Error)
	}
	for _, kv := range spec.Env {
		name, v, _ := strings.Cut(kv, "=")
		c.env = setEnv(c.env, name, v)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		c.Close()
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		c.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		c.Close()
		return nil, err
	}
	cmd, conf, err := r.spawn(c, inR, outW, errW)
	if err != nil {
		closeAll(inW, outR, errR)
		c.Close()
		return nil, fmt.Errorf("cannot start %s: %w", spec.Name, err)
	}
	c.conf = conf // released with the scratch folder by c.Close
	p := &Process{Stdin: inW, Stdout: outR, cmd: cmd, conf: conf, prepared: c, errR: errR, exited: make(chan struct{})}
	p.stderr.t.max = r.stderrTail()
	p.reads.Add(1)
	go func() { defer p.reads.Done(); p.stderr.readFrom(errR) }()
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		close(p.exited)
	}()
	return p, nil
}

// Pid is the program's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the program has exited.
func (p *Process) Done() <-chan struct{} { return p.exited }

// Stderr is the end of what the program wrote on stderr so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// Exit says how the program ended ("" while it runs): its exit status or signal, and the last
// line of its stderr, where most programs say why.
func (p *Process) Exit() string {
	select {
	case <-p.exited:
	default:
		return ""
	}
	msg := describeExit(p.cmd.ProcessState)
	if line := lastLine(p.Stderr()); line != "" {
		msg += ": " + line
	}
	return msg
}

// Stop kills the program and everything it started (its process group, then its cgroup or its
// orphans), waits for it, and frees its scratch folder. Calling it again does nothing.
func (p *Process) Stop() {
	p.stopOnce.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		p.conf.killAll()
		done := make(chan struct{})
		go func() { p.reads.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(pipeGrace):
		}
		closeAll(p.errR, p.Stdin.(*os.File), p.Stdout.(*os.File))
		p.prepared.Close()
	})
}

// lockedTail is a tailBuf read while the program runs.
type lockedTail struct {
	mu sync.Mutex
	t  tailBuf
}

func (l *lockedTail) readFrom(r io.Reader) {
	b := make([]byte, 8<<10)
	for {
		n, err := r.Read(b)
		if n > 0 {
			l.mu.Lock()
			l.t.add(b[:n])
			l.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (l *lockedTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.String()
}
