// Package clustertest starts the real svc binary for the tests that run the
// service as separate processes (the chaos scenarios and the HTTP
// benchmark): it builds the binary, runs its one-shot commands and keeps
// its long-running processes, which can be stopped, killed and started
// again.
package clustertest

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// OperatorKey enrolls name as the first admin of the migrated database at
// dbURL and writes their key to a file of dir (mode 0600), whose path it
// returns: what svc admin's signed commands take as --key or
// SVC_OPERATOR_KEY.
func OperatorKey(t testing.TB, dbURL, dir, name string) string {
	t.Helper()
	d, err := db.Open(context.Background(), dbURL, 1)
	if err != nil {
		t.Fatalf("operator key: %v", err)
	}
	defer d.Close()
	s := operatortest.Team(t, d.Bun, time.Now, operatortest.Member{Name: name, Role: operator.Admin})[name]
	path := filepath.Join(dir, name+".key")
	if err := s.WriteFile(path); err != nil {
		t.Fatalf("operator key: %v", err)
	}
	return path
}

// Build compiles ./cmd/svc into dir and returns the binary's path.
func Build(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "svc")
	build := exec.Command("go", "build", "-o", bin, "./cmd/svc")
	build.Dir = dbtest.ModuleRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build svc: %v\n%s", err, out)
	}
	return bin
}

// Run runs a one-shot svc command (bin args...) with env and returns its
// output; a failure ends the test with both outputs.
func Run(t testing.TB, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("svc %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// LastLine is the last non-blank line of s, trimmed (what svc admin keys
// mint prints last is the key).
func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// SimulatorEnv runs `svc simulator simArgs... --print-env` and returns the
// service's settings for that simulator (BTCPAY_URL, its key and store,
// TRONGRID_URL, TRON_HOT_WALLET, USDT_POOL_ADDRESSES) as NAME=value.
func SimulatorEnv(t testing.TB, bin string, env []string, simArgs ...string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(Run(t, bin, env, append(append([]string{"simulator"}, simArgs...), "--print-env")...), "\n") {
		kv, ok := strings.CutPrefix(strings.TrimSpace(line), "export ")
		if !ok {
			continue
		}
		name, val, _ := strings.Cut(kv, "=")
		out = append(out, name+"="+strings.Trim(val, "'"))
	}
	return out
}

// Tail is the end of a log file, for a failure message.
func Tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Proc is one long-running process (bin args..., with env), its output
// appended to the file Log. Ready, when set, is a URL that answers 200 once
// the process serves.
type Proc struct {
	Name, Bin, Log, Ready string
	Args, Env             []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the process; the test binary dying takes it along.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = p.Env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// Pid is the process id of the running process (0: never started).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Alive says whether the process was started and has not exited.
func (p *Proc) Alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the process and returns what closes once it has
// exited (nil: never started).
func (p *Proc) signal(sig syscall.Signal) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	return p.done
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	if done := p.signal(syscall.SIGKILL); done != nil {
		<-done
	}
}

// Stop asks the process to shut down (SIGTERM) and kills it if it has not
// within 20 s.
func (p *Proc) Stop() {
	done := p.signal(syscall.SIGTERM)
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		p.Kill()
	}
}

// WaitReady waits until Ready answers 200 (at once when Ready is empty),
// and fails early when the process exits.
func (p *Proc) WaitReady(within time.Duration) error {
	if p.Ready == "" {
		return nil
	}
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if r, err := http.Get(p.Ready); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return errors.New("exited")
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("not ready in time")
}
