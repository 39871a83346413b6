// Package servicetest tests chatd service binaries through their real entry
// point: it builds a service's main package, starts the binary with chosen
// CHATD_* settings, waits for its health service to report SERVING, sends it
// SIGTERM and checks that it exits 0.
package servicetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// Deadlines for the waits below. Start-up includes the binary's own start,
// not its build.
const (
	StartTimeout = 30 * time.Second
	StopTimeout  = 30 * time.Second
	pollInterval = 25 * time.Millisecond
)

// Build compiles the main package in dir (relative to the test's working
// directory, usually ".") and returns the path of the binary, which lives
// in a temporary directory removed after the test.
func Build(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "service")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build in %s:\n%s", dir, out)
	return bin
}

// Env returns the test process's environment without any CHATD_* variable
// (so a developer's settings cannot leak into a test), plus extra.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHATD_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Process is a running service binary.
type Process struct {
	cmd    *exec.Cmd
	stdout *buffer
	stderr *buffer
	exited chan struct{} // closed once the process has been waited for
	err    error         // the Wait error, valid after exited is closed
}

// Start runs bin with env (see Env) and args, and kills it at the end of
// the test if it is still running.
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{stdout: &buffer{}, stderr: &buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	// A profiled process writes its profile as it stops, and one marking a
	// timeline its last marks (pkg/telemetry/timeline).
	profiling := slices.ContainsFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, service.CPUProfileEnv+"=") || strings.HasPrefix(kv, timeline.Env+"=")
	})
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		if profiling {
			// Ask it to stop, and kill it only when it does not.
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
				return
			case <-time.After(StopTimeout):
			}
		}
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// CPU is the process's user and system CPU time so far, from
// /proc/<pid>/stat (Linux only; 0 elsewhere or once it has exited): what
// the benchmarks divide by the work done.
func (p *Process) CPU() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command's ")" (which may hold spaces): state is
	// the first, utime and stime the 12th and 13th, in clock ticks (100/s
	// on Linux).
	_, rest, ok := strings.Cut(string(b), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * (time.Second / 100)
}

// Stderr returns what the process wrote to standard error so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// Stdout returns what the process wrote to standard output so far.
func (p *Process) Stdout() string { return p.stdout.String() }

// WaitServing polls the gRPC health service at addr until every one of
// services reports SERVING, failing the test when the process exits first
// or StartTimeout passes.
func (p *Process) WaitServing(t testing.TB, addr string, services ...string) {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Retry the connection quickly: the default backoff waits a second
		// after the first refusal, while the binary is still starting.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: pollInterval, Multiplier: 1.6, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}))
	require.NoError(t, err)
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	p.poll(t, fmt.Sprintf("gRPC health at %s to report SERVING for %q", addr, services), func() error {
		for _, name := range services {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			cancel()
			if err != nil {
				return err
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("service %q is %s", name, resp.GetStatus())
			}
		}
		return nil
	})
}

// WaitHTTP polls url until it answers 200, failing the test when the
// process exits first or StartTimeout passes.
func (p *Process) WaitHTTP(t testing.TB, url string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	p.poll(t, "GET "+url+" to answer 200", func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
}

// poll calls cond until it returns nil.
func (p *Process) poll(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(StartTimeout)
	for {
		err := cond()
		if err == nil {
			select {
			case <-p.exited:
				// Whatever answered, it was not this process.
				require.FailNow(t, "process exited, yet something answered "+what,
					"exit: %v\nstderr:\n%s", p.err, p.Stderr())
			default:
			}
			return
		}
		select {
		case <-p.exited:
			require.FailNow(t, "process exited while waiting for "+what,
				"exit: %v\nstderr:\n%s", p.err, p.Stderr())
		default:
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting for "+what,
				"last error: %v\nstderr:\n%s", err, p.Stderr())
		}
		time.Sleep(pollInterval)
	}
}

// Terminate sends SIGTERM and returns the exit code, failing the test when
// the process does not exit within StopTimeout.
func (p *Process) Terminate(t testing.TB) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	return p.Wait(t, StopTimeout)
}

// Kill sends SIGKILL (the process gets no chance to clean up, as in a
// crash) and waits for it to exit.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	select {
	case <-p.exited:
		require.FailNow(t, "process exited before it was killed", "exit: %v\nstderr:\n%s", p.err, p.Stderr())
	default:
	}
	require.NoError(t, p.cmd.Process.Kill())
	<-p.exited
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Wait waits up to timeout for the process to exit and returns its exit
// code (-1 when a signal killed it).
func (p *Process) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		require.FailNow(t, "process did not exit in time", "after %s\nstderr:\n%s", timeout, p.Stderr())
	}
	var exitErr *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exitErr) {
		require.FailNow(t, "waiting for process", "%v", p.err)
	}
	return p.cmd.ProcessState.ExitCode()
}

// Exec runs bin to completion (at most StartTimeout) and returns its exit
// code and output.
func Exec(t testing.TB, bin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := Start(t, bin, env, args...)
	code = p.Wait(t, StartTimeout)
	return code, p.Stdout(), p.Stderr()
}

// Lifecycle describes a service for CheckLifecycle.
type Lifecycle struct {
	// Name is the service's short name ("api").
	Name string
	// HTTP says the service has CHATD_HTTP_ADDR, whose /healthz is checked.
	HTTP bool
	// Env holds extra KEY=value settings.
	Env []string
}

// CheckLifecycle starts bin on free local ports, waits until its health
// service reports SERVING for "" and for the service's own name (and, with
// l.HTTP, until /healthz answers 200), sends SIGTERM, and requires exit code
// 0 and JSON logs that name the service and its listen address.
func CheckLifecycle(t *testing.T, bin string, l Lifecycle) {
	t.Helper()
	grpcAddr := FreeAddr(t)
	env := Env(append([]string{"CHATD_GRPC_ADDR=" + grpcAddr}, l.Env...)...)
	var httpAddr string
	if l.HTTP {
		httpAddr = FreeAddr(t)
		env = append(env, "CHATD_HTTP_ADDR="+httpAddr)
	}

	p := Start(t, bin, env)
	p.WaitServing(t, grpcAddr, "", service.HealthName(l.Name))
	if l.HTTP {
		p.WaitHTTP(t, "http://"+httpAddr+service.HealthzPath)
	}
	code := p.Terminate(t)
	require.Equal(t, 0, code, "exit code after SIGTERM; stderr:\n%s", p.Stderr())

	logs := Logs(t, p.Stderr())
	serving := Find(logs, "serving")
	require.NotNil(t, serving, "no \"serving\" log line; stderr:\n%s", p.Stderr())
	require.Equal(t, l.Name, serving["service"])
	require.Equal(t, grpcAddr, serving["grpc_addr"])
	if l.HTTP {
		require.Equal(t, httpAddr, serving["http_addr"])
	}
	require.NotNil(t, Find(logs, "shutting down"), "no \"shutting down\" log line; stderr:\n%s", p.Stderr())
	require.NotNil(t, Find(logs, "stopped"), "no \"stopped\" log line; stderr:\n%s", p.Stderr())
}

// Logs parses stderr as JSON log lines, failing the test on a line that is
// not a JSON object.
func Logs(t testing.TB, stderr string) []map[string]any {
	t.Helper()
	var logs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m), "log line is not JSON: %s", line)
		logs = append(logs, m)
	}
	return logs
}

// Find returns the first log line whose msg is msg, or nil.
func Find(logs []map[string]any, msg string) map[string]any {
	for _, m := range logs {
		if m["msg"] == msg {
			return m
		}
	}
	return nil
}

// buffer is a bytes.Buffer safe for a writer and readers at once.
type buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// CheckHelp runs bin --help and requires exit code 0 and a listing that
// names every variable in vars together with its flag.
func CheckHelp(t *testing.T, bin string, vars ...string) {
	t.Helper()
	code, stdout, stderr := Exec(t, bin, Env(), "--help")
	require.Equal(t, 0, code, "--help exit code; stderr:\n%s", stderr)
	for _, v := range vars {
		require.Contains(t, stdout, v+", --"+service.FlagName(v)+" (", "--help does not list %s", v)
	}
}

// CheckRejects runs bin with the extra settings env and args and requires
// that it refuses to start: exit code 2 and want in its standard error.
func CheckRejects(t *testing.T, bin string, env []string, want string, args ...string) {
	t.Helper()
	code, _, stderr := Exec(t, bin, Env(env...), args...)
	require.Equal(t, service.ExitUsage, code, "exit code; stderr:\n%s", stderr)
	require.Contains(t, stderr, want)
}
