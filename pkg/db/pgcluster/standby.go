package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby starts a streaming-replication standby of primary in dir: a
// base backup (pg_basebackup) that follows the primary's WAL under the
// application_name name, so that a primary started with
// Options.SynchronousStandby = name waits for it on every commit. The
// standby answers read-only queries until Promote. opts applies as in
// Start (its SynchronousStandby is ignored: a promoted standby has no
// standby of its own to wait for).
func StartStandby(dir string, primary *Cluster, name string, opts Options) (*Cluster, error) {
	opts.SynchronousStandby = ""
	return start(dir, opts, func(run func(string, ...string) *exec.Cmd, data string) error {
		conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.Port, name)
		if out, err := run(Bin("pg_basebackup"), "-D", data, "-d", conninfo, "-R", "-X", "stream", "-c", "fast", "--no-sync").CombinedOutput(); err != nil {
			return fmt.Errorf("pg_basebackup: %v: %s", err, out)
		}
		// -R wrote standby.signal and a primary_conninfo; this one names
		// the standby as the primary's synchronous_standby_names does.
		f, err := os.OpenFile(filepath.Join(data, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "primary_conninfo = '%s'\n", conninfo)
		return errors.Join(err, f.Close())
	})
}

// WaitSynchronous waits until the standby named name streams from c as its
// synchronous standby (pg_stat_replication.sync_state = 'sync').
func (c *Cluster) WaitSynchronous(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		var state string
		err := conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = $1`, name).Scan(&state)
		if err == nil && state == "sync" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("standby %s is not synchronous (state %q, %v): %w", name, state, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill ends the server as a crash of its host would: the postmaster and
// every process it started get SIGKILL at once, so no session sees a
// shutdown message and nothing is flushed. The data directory is left
// as the crash left it.
func (c *Cluster) Kill() error {
	raw, err := os.ReadFile(filepath.Join(c.Dir, "data", "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("read postmaster.pid: %w", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return fmt.Errorf("postmaster.pid: %q: %w", line, err)
	}
	// Stopped first, the postmaster forks no new backend while its
	// children are listed.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop postmaster %d: %w", pid, err)
	}
	children := childrenOf(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, child := range children {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	// Wait until the port is free: the crash is complete.
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// childrenOf lists the processes whose parent is pid (/proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		_, rest, ok := strings.Cut(string(stat), ") ")
		fields := strings.Fields(rest)
		if !ok || len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// Promote makes a standby a primary (pg_ctl promote) and waits until it
// accepts writes.
func (c *Cluster) Promote() error {
	if out, err := c.run(Bin("pg_ctl"), "-D", filepath.Join(c.Dir, "data"), "-w", "promote").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl promote: %v: %s", err, out)
	}
	return nil
}
