// Package milvustest gives tests a Milvus server. ServerFor (server.go) is the one
// to use: the real Milvus 2.3.5 standalone server, shared by every test binary of a run. Start
// runs milvus-lite (a pure-Python stand-in that `make setup` also installs) on a free loopback
// port with its data in a temp dir, for quick local runs (SKEIN_MILVUS_TEST=lite).
package milvustest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
)

// EnvServer overrides the milvus-lite executable.
const EnvServer = "SKEIN_MILVUS_LITE"

// Server is a running milvus-lite server.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	out  *devtest.LogBuffer
}

// Executable finds the milvus-lite server program.
func Executable() (string, error) {
	if p := os.Getenv(EnvServer); p != "" {
		return p, nil
	}
	p := filepath.Join(devenv.ToolsDir(), "venv", "bin", "milvus-lite")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("milvus-lite server not found at %s: run `make setup` (or set %s)", p, EnvServer)
	}
	return p, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs a server for the test (skipping, or failing under CI, when it is not installed) and
// stops it when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	exe, err := Executable()
	if err != nil {
		if devenv.Required() {
			tb.Fatal(err)
		}
		tb.Skip(err)
	}
	var s *Server
	for attempt := 0; attempt < 3; attempt++ {
		s, err = start(exe, tb.TempDir())
		if err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("start milvus-lite: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func start(exe, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(exe, "server", "--data-dir", filepath.Join(dir, "milvus"), "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	out := &devtest.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so Stop ends the whole tree; and killed with the test binary, so a
	// test that times out leaves no server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", exe, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s := &Server{Addr: addr, cmd: cmd, out: out}
	var quit bool
	var exitErr error
	err = poll.Wait(90*time.Second, func() error {
		select {
		case exitErr = <-exited:
			quit = true
			return nil // nothing more to wait for
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
	switch {
	case quit:
		return nil, fmt.Errorf("milvus-lite exited (%v): %s", exitErr, out.String())
	case err != nil:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return nil, fmt.Errorf("milvus-lite did not listen on %s within 90s (%v): %s", addr, err, out.String())
	}
	go func() { <-exited }()
	return s, nil
}

// Stop ends the server's process group.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		_ = poll.Wait(5*time.Second, func() error { return gone(s.cmd.Process.Pid) })
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// gone is a check (for poll) that no process answers to pid (negative: a process group).
func gone(pid int) error {
	if syscall.Kill(pid, 0) != nil {
		return nil
	}
	return fmt.Errorf("process %d still running", pid)
}

// PGID is the server's process group.
func (s *Server) PGID() int { return s.cmd.Process.Pid }

// Log is the server's output so far.
func (s *Server) Log() string { return s.out.String() }
