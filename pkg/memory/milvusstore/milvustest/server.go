package milvustest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/poll"
)

// The real server: Milvus 2.3.5 standalone from the PyPI package `milvus` (C++ engine, embedded
// etcd and rocksmq), which `make setup` installs into the tools venv. Its etcd always claims the
// loopback ports 2379/2380, so one machine runs one of them; every test binary of a run shares
// it through a lease folder (a lock file, a state file, one lease file per process). The first
// process to need it starts it, the last to let go stops it, and a process that died without
// letting go is noticed by its dead pid. Tests keep apart by using their own collections.

// Environment knobs.
const (
	// EnvRealServer overrides the milvus-server executable.
	EnvRealServer = "SKEIN_MILVUS_SERVER"
	// EnvRealAddr points the tests at a Milvus server someone else runs (host:port); nothing
	// is started or stopped then.
	EnvRealAddr = "SKEIN_MILVUS_ADDR"
	// EnvMode chooses the server the Milvus tests use: "server" (default, the real Milvus) or
	// "lite" (milvus-lite, a quick pure-Python stand-in for local runs only).
	EnvMode = "SKEIN_MILVUS_TEST"
	// EnvStateDir overrides the lease folder (default <tools>/milvus-test).
	EnvStateDir = "SKEIN_MILVUS_STATE_DIR"
)

// startTimeout bounds one start of the real server (it takes ~10 s on an idle machine; far
// more on a loaded 2-core one).
const startTimeout = 180 * time.Second

// Shared is what a test needs of the shared server.
type Shared struct {
	Addr string
	// PGID is the server's process group (0 when it runs elsewhere), for memory figures.
	PGID int
	// Lite is true when the quick milvus-lite mode runs instead of the real server.
	Lite bool
	log  func() string
}

// Log is the tail of the server's log, for failure messages.
func (s *Shared) Log() string {
	if s.log == nil {
		return ""
	}
	return s.log()
}

type state struct {
	PID     int       `json:"pid"` // leader of the server's process group
	Addr    string    `json:"addr"`
	Started time.Time `json:"started"`
}

var (
	sharedMu  sync.Mutex
	shared    *Shared
	sharedErr error
	leased    string // lease folder this process holds a lease in
	liteSrv   *Server
)

// RealExecutable finds milvus-server.
func RealExecutable() (string, error) {
	if p := os.Getenv(EnvRealServer); p != "" {
		return p, nil
	}
	p := filepath.Join(devenv.ToolsDir(), "venv", "bin", "milvus-server")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("milvus-server (PyPI milvus==2.3.5) not found at %s: run `make memory-setup` (or set %s)", p, EnvRealServer)
	}
	return p, nil
}

func stateDir() string {
	if d := os.Getenv(EnvStateDir); d != "" {
		return d
	}
	return filepath.Join(devenv.ToolsDir(), "milvus-test")
}

// Server returns the run's shared Milvus server, starting it on first use in this process.
// It skips the test (fails under CI) when the server is not installed. A test binary that calls
// it must release its lease on exit: use Main in the package's TestMain.
func ServerFor(tb testing.TB) *Shared {
	tb.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = acquire()
	}
	if sharedErr != nil {
		var missing *notInstalled
		if errors.As(sharedErr, &missing) && !devenv.Required() {
			tb.Skip(sharedErr)
		}
		tb.Fatal(sharedErr)
	}
	return shared
}

// Main runs the tests and then lets go of the shared server (stopping it when no other test
// binary uses it). Call it from TestMain: os.Exit(milvustest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	Release()
	return code
}

// Release gives up this process's use of the shared server.
func Release() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if liteSrv != nil {
		liteSrv.Stop()
		liteSrv = nil
	}
	if leased != "" {
		if err := release(leased); err != nil {
			fmt.Fprintf(os.Stderr, "milvustest: release shared milvus server: %v\n", err)
		}
		leased = ""
	}
	shared, sharedErr = nil, nil
}

type notInstalled struct{ err error }

func (n *notInstalled) Error() string { return n.err.Error() }

func acquire() (*Shared, error) {
	if a := os.Getenv(EnvRealAddr); a != "" {
		return &Shared{Addr: a}, nil
	}
	if os.Getenv(EnvMode) == "lite" {
		exe, err := Executable()
		if err != nil {
			return nil, &notInstalled{err}
		}
		dir, err := os.MkdirTemp("", "skein-milvus-lite-")
		if err != nil {
			return nil, err
		}
		s, err := start(exe, dir)
		if err != nil {
			return nil, fmt.Errorf("start milvus-lite: %w", err)
		}
		liteSrv = s
		return &Shared{Addr: s.Addr, Lite: true, PGID: s.cmd.Process.Pid, log: s.Log}, nil
	}
	exe, err := RealExecutable()
	if err != nil {
		return nil, &notInstalled{err}
	}
	dir := stateDir()
	if err := os.MkdirAll(filepath.Join(dir, "users"), 0o755); err != nil {
		return nil, err
	}
	unlock, err := lock(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	pruneLeases(dir)
	st, ok := readState(dir)
	logf := func() string {
		return tailFile(filepath.Join(dir, "data", "logs", "milvus-stderr.log"), 3000) + tailFile(filepath.Join(dir, "server.log"), 1000)
	}
	if ok && alive(st.PID) && healthy(st.Addr, 10*time.Second) == nil {
		if err := addLease(dir); err != nil {
			return nil, err
		}
		leased = dir
		return &Shared{Addr: st.Addr, PGID: st.PID, log: logf}, nil
	}
	if ok && alive(st.PID) {
		stopGroup(st.PID) // recorded but not answering: start over
	}
	st, err = startReal(exe, dir)
	if err != nil {
		return nil, err
	}
	if err := writeState(dir, st); err != nil {
		stopGroup(st.PID)
		return nil, err
	}
	if err := addLease(dir); err != nil {
		return nil, err
	}
	leased = dir
	return &Shared{Addr: st.Addr, PGID: st.PID, log: logf}, nil
}

func release(dir string) error {
	unlock, err := lock(dir)
	if err != nil {
		return err
	}
	defer unlock()
	_ = os.Remove(filepath.Join(dir, "users", strconv.Itoa(os.Getpid())))
	if pruneLeases(dir) > 0 {
		return nil
	}
	if st, ok := readState(dir); ok {
		stopGroup(st.PID)
	}
	_ = os.Remove(filepath.Join(dir, "server.json"))
	// The data only ever holds test collections; do not let runs pile it up.
	_ = os.RemoveAll(filepath.Join(dir, "data", "data"))
	return nil
}

func lock(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func addLease(dir string) error {
	return os.WriteFile(filepath.Join(dir, "users", strconv.Itoa(os.Getpid())), nil, 0o644)
}

// pruneLeases drops the leases of dead processes and returns how many live ones remain.
func pruneLeases(dir string) int {
	ents, _ := os.ReadDir(filepath.Join(dir, "users"))
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			_ = os.Remove(filepath.Join(dir, "users", e.Name()))
			continue
		}
		n++
	}
	return n
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie still answers kill(0); it is dead for our purpose.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err == nil {
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return false
		}
	}
	return true
}

func readState(dir string) (state, bool) {
	var st state
	b, err := os.ReadFile(filepath.Join(dir, "server.json"))
	if err != nil || json.Unmarshal(b, &st) != nil || st.Addr == "" {
		return state{}, false
	}
	return st, true
}

func writeState(dir string, st state) error {
	b, _ := json.Marshal(st)
	return os.WriteFile(filepath.Join(dir, "server.json"), b, 0o644)
}

// stopGroup ends the server's process group: SIGTERM (milvus flushes and leaves etcd cleanly),
// then SIGKILL after a few seconds.
func stopGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	if poll.Wait(10*time.Second, func() error { return gone(-pid) }) == nil {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = poll.Wait(5*time.Second, func() error { return gone(-pid) })
}

func startReal(exe, dir string) (state, error) {
	data := filepath.Join(dir, "data")
	_ = os.RemoveAll(filepath.Join(data, "data")) // collections of earlier runs
	port, err := freePort()
	if err != nil {
		return state{}, err
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return state{}, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, "--data", data, "--proxy-port", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: it outlives the test binary that started it (others may share
	// it) and is stopped as a group, the Python launcher and the milvus binary it runs together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return state{}, fmt.Errorf("run %s: %w", exe, err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var quit bool
	var exitErr error
	var addr string
	err = poll.Wait(startTimeout, func() error {
		select {
		case exitErr = <-exited:
			quit = true
			return nil // nothing more to wait for
		default:
		}
		// The launcher moves the proxy port up when it is taken; the config it writes is the truth.
		p := proxyPort(filepath.Join(data, "configs", "milvus.yaml"))
		if p == 0 {
			return errors.New("no proxy port in its config yet")
		}
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		return healthy(addr, 3*time.Second)
	})
	switch {
	case quit:
		stopGroup(pid)
		return state{}, fmt.Errorf("milvus-server exited (%v); is another Milvus holding the etcd ports 2379/2380? log: %s", exitErr,
			tailFile(filepath.Join(dir, "server.log"), 2000)+tailFile(filepath.Join(data, "logs", "milvus-stderr.log"), 2000))
	case err != nil:
		stopGroup(pid)
		return state{}, fmt.Errorf("milvus-server did not become healthy within %s (last: %v): %s", startTimeout, err,
			tailFile(filepath.Join(data, "logs", "milvus-stderr.log"), 2000))
	}
	return state{PID: pid, Addr: addr, Started: time.Now()}, nil
}

// proxyPort reads proxy.port from the config milvus-server wrote (0 until it exists).
func proxyPort(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	inProxy := false
	for sc.Scan() {
		line := sc.Text()
		if len(line) > 0 && line[0] != ' ' && line[0] != '#' {
			inProxy = strings.HasPrefix(line, "proxy:")
			continue
		}
		if inProxy && strings.HasPrefix(line, "  port:") {
			v := strings.TrimSpace(strings.TrimPrefix(line, "  port:"))
			if i := strings.IndexAny(v, " #"); i >= 0 {
				v = v[:i]
			}
			p, _ := strconv.Atoi(v)
			return p
		}
	}
	return 0
}

// healthy connects and asks the server whether every component is up.
func healthy(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := client.NewClient(ctx, client.Config{Address: addr})
	if err != nil {
		return err
	}
	defer c.Close()
	h, err := c.CheckHealth(ctx)
	if err != nil {
		return err
	}
	if !h.IsHealthy {
		return fmt.Errorf("unhealthy: %v", h.Reasons)
	}
	_, err = c.ListCollections(ctx)
	return err
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
