//go:build !linux

package tools

import (
	"os/exec"
	"syscall"
)

// Outside Linux a tool runs in its own process group only: no rlimits, no uid change, no
// cgroup or subreaper. skein's supported platform for running tools is Linux.
type hostSandbox struct {
	uid, gid int
	info     string
}

func (r *Runner) hostSandbox() (*hostSandbox, error) {
	return &hostSandbox{uid: -1, gid: -1, info: "tools run as the host's user in their own process group (no sandbox outside Linux)"}, nil
}

// SandboxInfo says in one line how tools are confined.
func (r *Runner) SandboxInfo() (string, error) {
	hs, _ := r.hostSandbox()
	return hs.info, nil
}

// SandboxGaps: none to report beyond SandboxInfo's line.
func (r *Runner) SandboxGaps() []string { return nil }

func (hs *hostSandbox) checkUser() (uid, gid int)   { return -1, -1 }
func (hs *hostSandbox) takeUser() (callUser, error) { return callUser{uid: -1, gid: -1}, nil }
func (hs *hostSandbox) putUser(callUser, bool)      {}
func (hs *hostSandbox) callTmp(*Tool, string) bool  { return false }

// HostTmpReason: calls keep the host's /tmp outside Linux.
func (r *Runner) HostTmpReason(*Tool) string { return "" }

type callConf struct{ lingering bool }

func (r *Runner) confine(cmd *exec.Cmd, _ *Prepared, _ bool) (*callConf, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return &callConf{}, nil
}

func (c *callConf) started(pid int) {}
func (c *callConf) killAll()        {}
func (c *callConf) release()        {}

const privateTmpDir = "/tmp"

// callNS: no mount namespace per call outside Linux.
type callNS struct{}

func (n *callNS) empty() bool { return true }
func (n *callNS) release()    {}

func (c *callConf) startTool(cmd *exec.Cmd) error { return cmd.Start() }

func accessibleBy(path string, uid, gid int, exec bool) bool { return true }

type insideError struct{ err error }

func (e *insideError) Error() string { return e.err.Error() }
