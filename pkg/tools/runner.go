package tools

import (
	"bytes"
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
	"unicode/utf8"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools/limits"
)

// Defaults of a Runner's zero value.
const (
	DefaultTimeout    = 30 * time.Second
	DefaultMaxOutput  = 1 << 20
	DefaultStderrTail = 2 << 10
	maxErrorLen       = 2 << 10
	// pipeGrace bounds how long output is still read after the process group is gone, in case
	// something outside the group (a daemon that called setsid) holds the pipes open.
	pipeGrace = 2 * time.Second
	// pipeAtomic is the least a pipe holds (POSIX PIPE_BUF; Linux pipes hold 64 KiB unless the
	// user is over its pipe quota, then one 4 KiB page).
	pipeAtomic = 4096
)

// Runner runs tools as subprocesses. The zero value is ready to use.
type Runner struct {
	// DefaultTimeout applies to tools whose manifest has no timeout_s (0: DefaultTimeout).
	DefaultTimeout time.Duration
	// MaxOutput caps stdout of tools whose manifest has no max_output_bytes (0: DefaultMaxOutput).
	MaxOutput int
	// StderrTail is how much of the end of stderr a failed call keeps (0: DefaultStderrTail).
	StderrTail int
	// LookupEnv reads the host environment the scrubbed one is built from (nil: os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Sandbox confines every tool: resource limits, uid, scratch folder, whole-tree kill.
	Sandbox Sandbox

	sbOnce sync.Once
	sb     *hostSandbox
	sbErr  error
}

func (r *Runner) timeout(t *Tool) time.Duration {
	def := r.DefaultTimeout
	if def <= 0 {
		def = DefaultTimeout
	}
	return t.Timeout(def)
}

func (r *Runner) maxOutput(t *Tool) int {
	if t.MaxOutputBytes > 0 {
		return t.MaxOutputBytes
	}
	if r.MaxOutput > 0 {
		return r.MaxOutput
	}
	return DefaultMaxOutput
}

func (r *Runner) stderrTail() int {
	if r.StderrTail > 0 {
		return r.StderrTail
	}
	return DefaultStderrTail
}

// Run validates args against the tool's input_schema, runs the tool with args on stdin and
// normalizes whatever happens into one ToolResult. It never returns a Go error: every failure is
// a result with OK false and a Kind, so the model sees it and the miner can learn from it.
func (r *Runner) Run(ctx context.Context, t *Tool, args json.RawMessage) protocol.ToolResult {
	c := r.Prepare(ctx, t, args)
	defer c.Close()
	return c.Run(ctx)
}

// Prepared is one tool call made ready up to the start of its process: its arguments checked, its
// environment, program and scratch folder in place. A host prepares a call while it records the
// call elsewhere, runs it once that record is written, and frees what is left (Close) after it
// has answered: neither the preparation nor the clean-up then waits on the caller's path.
type Prepared struct {
	r       *Runner
	t       *Tool
	args    json.RawMessage
	path    string
	env     []string
	dir     string
	scratch string
	ns      *callNS  // the mount namespace with scratch as its /tmp (nil: not made yet)
	spare   spareKey // where scratch and ns go back to
	// failed is why the call cannot start; Run returns it.
	failed *protocol.ToolResult
	conf   *callConf
	ran    bool

	hs         *hostSandbox
	user       callUser // the call's user, given back at Close
	hasUser    bool
	allow      uint32 // seccomp groups the tool may use
	privateTmp bool   // the call gets its own /tmp, /var/tmp, /dev/shm (scratch is its /tmp)
}

// Prepare does everything for a call of t with args that comes before starting its process. A
// call that cannot start (bad arguments, no program, no sandbox) is still prepared: its Run says
// why. Close must follow, run or not.
func (r *Runner) Prepare(ctx context.Context, t *Tool, args json.RawMessage) *Prepared {
	c := &Prepared{r: r, t: t}
	fail := func(kind, msg string) *Prepared {
		res := failure(kind, msg, "")
		c.failed = &res
		return c
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if err := t.ValidateArgs(args); err != nil {
		return fail(protocol.ToolErrBadArgs, err.Error())
	}
	callID := CallIDFrom(ctx)
	if callID != "" && t.CallIDArg != "" {
		args = withCallIDArg(args, t.CallIDArg, callID)
	}
	c.args = args
	hs, err := r.hostSandbox()
	if err != nil {
		return fail(protocol.ToolErrStart, "cannot start tool: sandbox: "+err.Error())
	}
	c.hs = hs
	if t.Sandbox != nil {
		if c.allow, err = limits.SeccompAllowMask(t.Sandbox.SeccompAllow); err != nil {
			return fail(protocol.ToolErrStart, "cannot start tool: "+err.Error())
		}
	}
	lookup := r.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	env := scrubbedEnv(lookup, t.Env)
	if callID != "" {
		env = append(env, protocol.EnvCallID+"="+callID)
	}
	if uid, gid := hs.checkUser(); uid >= 0 {
		var reachable string
		reachable, c.path, err = resolveAs(t.Argv, envValue(env, "PATH"), uid, gid)
		env = setEnv(env, "PATH", reachable)
	} else {
		c.path, err = lookPath(t.Argv[0])
	}
	if err != nil {
		return fail(protocol.ToolErrStart, "cannot start tool: "+err.Error())
	}
	c.privateTmp = hs.callTmp(t, c.path)
	if c.user, err = hs.takeUser(); err != nil {
		return fail(protocol.ToolErrStart, "cannot start tool: "+err.Error())
	}
	c.hasUser = true
	scratch, ns, spare, dir, home, err := r.callDirs(t, c.user.uid, c.user.gid)
	if err != nil {
		return fail(protocol.ToolErrStart, "cannot start tool: "+err.Error())
	}
	c.scratch, c.ns, c.spare, c.dir = scratch, ns, spare, dir
	// With its own /tmp, the call sees its scratch folder there, and only there.
	tmp := scratch
	if c.privateTmp {
		tmp = privateTmpDir
		if c.dir == scratch {
			c.dir = tmp
		}
		if home == scratch {
			home = tmp
		}
	}
	if home != "" {
		env = setEnv(env, "HOME", home)
	}
	c.env = setEnv(env, "TMPDIR", tmp)
	return c
}

// Close removes the call's cgroup and frees its scratch folder and mount namespace: removed, or
// kept for the next call of the tool when left empty (see spares). The call's processes are gone
// by then: Run kills them all before it returns.
func (c *Prepared) Close() {
	lingering := c.conf != nil && c.conf.lingering
	c.conf.release()
	c.conf = nil
	if c.scratch != "" {
		spares.put(c.spare, c.scratch, c.ns, !lingering)
	}
	c.scratch, c.ns = "", nil
	if c.hasUser {
		c.hs.putUser(c.user, !lingering)
		c.hasUser = false
	}
}

// Run starts the prepared call, waits for it within the tool's time limit or until ctx ends,
// kills whatever it left running and interprets its output. A call runs once; a second Run
// returns an error result.
func (c *Prepared) Run(ctx context.Context) protocol.ToolResult {
	if c.failed != nil {
		return *c.failed
	}
	if c.ran {
		return failure(protocol.ToolErrStart, "cannot start tool: this call already ran", "")
	}
	c.ran = true
	if err := ctx.Err(); err != nil {
		return failure(protocol.ToolErrTimeout, fmt.Sprintf("call abandoned before the tool started (%v)", context.Cause(ctx)), "")
	}
	r, t := c.r, c.t
	p, err := r.start(c)
	if err != nil {
		return failure(protocol.ToolErrStart, "cannot start tool: "+err.Error(), "")
	}
	c.conf = p.conf
	if len(c.args) <= pipeAtomic {
		p.feed(c.args) // fits in an empty pipe: the write cannot block
	} else {
		go p.feed(c.args)
	}

	timeout := r.timeout(t)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut, cancelled bool
	select {
	case <-p.exited:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
		cancelled = true
	case <-p.stdout.overflow:
	}
	// Killing the group, then the call's cgroup or orphans, also ends anything the tool left
	// running in the background after a normal exit: a call owns no processes once it answered.
	p.killGroup()
	<-p.exited
	p.conf.killAll()
	p.drain()

	tail := p.stderr.String()
	if p.state != nil && p.state.ExitCode() == trampolineExit && strings.HasPrefix(tail, trampolinePrefix) {
		return failure(protocol.ToolErrStart, "cannot start tool: "+strings.TrimSpace(strings.TrimPrefix(tail, trampolinePrefix)), "")
	}
	switch {
	case timedOut:
		return failure(protocol.ToolErrTimeout, fmt.Sprintf("timed out after %s; the tool's process group was killed", timeout), tail)
	case cancelled:
		return failure(protocol.ToolErrTimeout, fmt.Sprintf("call abandoned (%v); the tool's process group was killed", context.Cause(ctx)), tail)
	case p.stdout.over:
		res := failure(protocol.ToolErrTooLarge, fmt.Sprintf("stdout exceeded the %d-byte cap; the tool was stopped and its output dropped", p.stdout.max), tail)
		res.Truncated = true
		return res
	}
	return interpret(p.stdout.buf.Bytes(), p.state, tail)
}

// Check reports whether t can start under this runner's sandbox now: its program found on the
// tool's PATH and, when tools run as another user, its files reachable by that user. A host
// logs this at startup, so a permission problem shows before the first call.
func (r *Runner) Check(t *Tool) error {
	hs, err := r.hostSandbox()
	if err != nil {
		return fmt.Errorf("tool %s: sandbox: %w", t.Name, err)
	}
	if uid, gid := hs.checkUser(); uid >= 0 {
		lookup := r.LookupEnv
		if lookup == nil {
			lookup = os.LookupEnv
		}
		path := reachablePATH(envValue(scrubbedEnv(lookup, t.Env), "PATH"), uid, gid)
		_, err = lookPathAs(t.Argv, path, uid, gid)
	} else {
		_, err = lookPath(t.Argv[0])
	}
	if err != nil {
		return fmt.Errorf("tool %s (%s): %w", t.Name, t.Path, err)
	}
	return nil
}

// proc is one running tool with its pipes.
type proc struct {
	cmd    *exec.Cmd
	conf   *callConf
	pgid   int
	stdin  *os.File
	outR   *os.File
	errR   *os.File
	stdout *capped
	stderr *tailBuf
	state  *os.ProcessState
	exited chan struct{}
	reads  sync.WaitGroup
}

func (r *Runner) start(c *Prepared) (*proc, error) {
	t := c.t
	// Plain pipes (not io.Writers) so Wait returns when the process exits even if a grandchild
	// still holds stdout; reading is ours and is ended by killing the group.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, err
	}
	cmd, conf, err := r.spawn(c, inR, outW, errW)
	if err != nil {
		closeAll(inW, outR, errR)
		return nil, err
	}
	p := &proc{
		cmd: cmd, conf: conf, pgid: cmd.Process.Pid, stdin: inW, outR: outR, errR: errR,
		stdout: newCapped(r.maxOutput(t)),
		stderr: &tailBuf{max: r.stderrTail()},
		exited: make(chan struct{}),
	}
	p.reads.Add(2)
	go func() { defer p.reads.Done(); p.stdout.readFrom(outR) }()
	go func() { defer p.reads.Done(); p.stderr.readFrom(errR) }()
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	return p, nil
}

// spawn starts the prepared call's program, confined (see confine), with the child's ends of its
// pipes, which it closes: a call's process (start) and a long-lived one (StartProcess) start
// the same way.
func (r *Runner) spawn(c *Prepared, stdin, stdout, stderr *os.File) (*exec.Cmd, *callConf, error) {
	newCmd := func() *exec.Cmd {
		return &exec.Cmd{Path: c.path, Args: append([]string(nil), c.t.Argv...), Dir: c.dir, Env: c.env, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	}
	cmd := newCmd()
	// Its own process group, parent-death signal, uid, namespaces, cgroup, limits, Landlock
	// domain and seccomp filter: see confine.
	conf, err := r.confine(cmd, c, false)
	if err == nil {
		err = conf.startTool(cmd)
	}
	var inside *insideError
	if errors.As(err, &inside) {
		// A program the host cannot step (a 32-bit one, or one its user may run but not
		// read): this call starts through the trampoline.
		conf.release()
		cmd = newCmd()
		if conf, err = r.confine(cmd, c, true); err == nil {
			err = conf.startTool(cmd)
		}
	}
	closeAll(stdin, stdout, stderr) // the child has its copies
	if err != nil {
		conf.release()
		return nil, nil, err
	}
	conf.started(cmd.Process.Pid)
	return cmd, conf, nil
}

// feed writes the arguments and closes stdin. A tool that never reads stdin makes the write
// fail with EPIPE once it exits, which is fine.
func (p *proc) feed(args []byte) {
	_, _ = p.stdin.Write(args)
	_ = p.stdin.Close()
}

func (p *proc) killGroup() {
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
}

// drain waits for the output readers, closing the pipes if something outside the process group
// keeps them open.
func (p *proc) drain() {
	done := make(chan struct{})
	go func() { p.reads.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(pipeGrace):
		closeAll(p.outR, p.errR)
		<-done
	}
	closeAll(p.outR, p.errR, p.stdin)
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// capped keeps stdout up to max bytes and signals overflow once, then discards the rest so the
// writer never blocks before it is killed.
type capped struct {
	buf      bytes.Buffer
	max      int
	over     bool
	overflow chan struct{}
}

func newCapped(max int) *capped { return &capped{max: max, overflow: make(chan struct{})} }

func (c *capped) readFrom(r io.Reader) {
	p := make([]byte, 32<<10)
	for {
		n, err := r.Read(p)
		if n > 0 && !c.over {
			if c.buf.Len()+n > c.max {
				c.over = true
				c.buf.Reset()
				close(c.overflow)
			} else {
				c.buf.Write(p[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// tailBuf keeps the last max bytes written.
type tailBuf struct {
	buf     []byte
	max     int
	dropped bool
}

func (t *tailBuf) readFrom(r io.Reader) {
	p := make([]byte, 8<<10)
	for {
		n, err := r.Read(p)
		if n > 0 {
			t.add(p[:n])
		}
		if err != nil {
			return
		}
	}
}

func (t *tailBuf) add(p []byte) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.dropped = true
	}
}

func (t *tailBuf) String() string {
	b := t.buf
	dropped := t.dropped
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		dropped = true
	}
	if dropped {
		// Start at a rune boundary so the tail is clean text.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if dropped {
		s = "…" + s
	}
	return s
}

func failure(kind, msg, stderr string) protocol.ToolResult {
	return protocol.ToolResult{OK: false, Kind: kind, Error: clip(msg), Stderr: stderr}
}

func clip(s string) string {
	if len(s) <= maxErrorLen {
		return s
	}
	cut := maxErrorLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// interpret turns a finished process's stdout and exit status into a result. Stdout is checked
// first: a tool that prints something that is not JSON is malformed whatever its exit code,
// because its exit code cannot be trusted either.
func interpret(stdout []byte, st *os.ProcessState, stderr string) protocol.ToolResult {
	out := bytes.TrimSpace(stdout)
	exitOK := st != nil && st.Success()
	if len(out) == 0 {
		if exitOK {
			return failure(protocol.ToolErrMalformed, "the tool exited 0 but printed nothing on stdout; a tool must print one JSON value", stderr)
		}
		return failure(protocol.ToolErrExit, withStatus(lastLine(stderr), st), stderr)
	}
	if !json.Valid(out) {
		var v json.RawMessage
		detail := "invalid JSON"
		if err := json.Unmarshal(out, &v); err != nil {
			detail = err.Error()
		}
		msg := fmt.Sprintf("stdout is not one JSON value (%s); it began %q", detail, snippet(out, 120))
		if !exitOK {
			msg += "; " + describeExit(st)
		}
		return failure(protocol.ToolErrMalformed, msg, stderr)
	}
	env := parseEnvelope(out)
	switch {
	case !exitOK:
		res := failure(protocol.ToolErrExit, withStatus(firstNonEmpty(env.err, lastLine(stderr)), st), stderr)
		res.Result = env.result
		return res
	case env.isEnvelope && !env.ok:
		res := failure(protocol.ToolErrToolError, firstNonEmpty(env.err, "the tool answered ok:false without an error message"), stderr)
		res.Result = env.result
		return res
	}
	return protocol.ToolResult{OK: true, Result: env.result}
}

// envelope is a tool's answer read as {ok, error?, result?}. A JSON value that is not an
// object with a boolean "ok" is a plain result of a successful call.
type envelope struct {
	isEnvelope bool
	ok         bool
	err        string
	result     json.RawMessage
}

func parseEnvelope(out []byte) envelope {
	compact := func(b []byte) json.RawMessage {
		var buf bytes.Buffer
		if json.Compact(&buf, b) != nil {
			return append(json.RawMessage(nil), b...)
		}
		return buf.Bytes()
	}
	var obj map[string]json.RawMessage
	if out[0] != '{' || json.Unmarshal(out, &obj) != nil {
		return envelope{ok: true, result: compact(out)}
	}
	okRaw, has := obj["ok"]
	var ok bool
	if !has || json.Unmarshal(okRaw, &ok) != nil {
		return envelope{ok: true, result: compact(out)}
	}
	e := envelope{isEnvelope: true, ok: ok}
	if raw, has := obj["error"]; has && string(raw) != "null" {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			e.err = s
		} else {
			e.err = string(compact(raw))
		}
	}
	if raw, has := obj["result"]; has {
		e.result = compact(raw)
		return e
	}
	// {"ok": true, "count": 3}: the other fields are the result, so nothing the tool said is lost.
	delete(obj, "ok")
	delete(obj, "error")
	if len(obj) > 0 {
		if b, err := json.Marshal(obj); err == nil {
			e.result = b
		}
	}
	return e
}

func withStatus(msg string, st *os.ProcessState) string {
	if msg == "" {
		return "the tool " + describeExit(st) + " without an error message"
	}
	return msg + " (" + describeExit(st) + ")"
}

func describeExit(st *os.ProcessState) string {
	if st == nil {
		return "did not report an exit status"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if ws.Signal() == syscall.SIGXCPU {
			return "was killed by signal " + ws.Signal().String() + ": it used up its CPU-time limit (sandbox cpu_s)"
		}
		return "was killed by signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exited with status %d", st.ExitCode())
}

// lastLine is the last non-empty line of stderr: where Python, Node and most CLIs put the error
// itself ("ZeroDivisionError: division by zero").
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n\r\t "), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return strings.TrimPrefix(l, "…")
		}
	}
	return ""
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}

func snippet(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
