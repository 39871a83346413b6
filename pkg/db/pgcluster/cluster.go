// Package pgcluster starts a private PostgreSQL cluster from the local
// server binaries (Debian's postgresql package): the throwaway cluster of
// the tests, and the kept cluster of `chatd dev` under .chatd/.
package pgcluster

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/chatd/chatd/pkg/localport"
)

// ErrUnreachable is returned by Start as root when the postgres user, which
// the server runs as, cannot enter the cluster's directory (a checkout under
// a private home such as /root, mode 0700).
var ErrUnreachable = errors.New("the postgres user cannot enter the cluster directory")

// Cluster is a running PostgreSQL server whose data lives in Dir/data.
type Cluster struct {
	// Dir holds data/ (the cluster), log and, when Options.Socket is set,
	// the Unix socket.
	Dir string
	// URL is the superuser's connection URL (database postgres, trust auth).
	URL string
	// Port is the server's port on 127.0.0.1.
	Port int
	run  func(name string, args ...string) *exec.Cmd
	// settings are the server's -o options (its port among them), kept so
	// Start can bring a stopped server back on the same address.
	settings string
	// releasePort gives the server's port back (Remove).
	releasePort func()
}

// Options tunes Start.
type Options struct {
	// Durable keeps fsync and full-page writes on (a kept cluster);
	// otherwise they are off, as a throwaway cluster wants.
	Durable bool
	// Socket also listens on a Unix socket in Dir; its path must stay
	// under the kernel's ~107-byte limit, so callers only set it for
	// short directories.
	Socket bool
	// MaxConnections defaults to 300.
	MaxConnections int
	// TrackStatements preloads pg_stat_statements (planning time
	// included), so that a benchmark can report each statement's server
	// time: CREATE EXTENSION pg_stat_statements in a database to read it.
	// The library comes with Debian's postgresql package.
	TrackStatements bool
	// SynchronousStandby, when set, is the application_name of a standby
	// every commit waits for (synchronous_standby_names, with
	// synchronous_commit on even on a throwaway cluster): a commit the
	// server acknowledged is on the standby too (StartStandby).
	SynchronousStandby string
	// Networks are further networks the server serves besides loopback:
	// it listens on each prefix's address and trusts every client in the
	// prefix (pg_hba.conf), so that a test's network namespace reaches it
	// over a veth link.
	Networks []netip.Prefix
}

// Start starts the cluster in dir, creating it with initdb when dir/data
// does not hold one yet, on a free 127.0.0.1 port. A server left running
// in dir by a process that died is stopped first. As root the cluster runs
// as the postgres user (initdb refuses root), so dir is chowned to it.
func Start(dir string, opts Options) (c *Cluster, err error) {
	return start(dir, opts, func(run func(string, ...string) *exec.Cmd, data string) error {
		// A fixed locale keeps initdb independent of the caller's
		// LANG/LC_* (an uninstalled locale makes it fail) while the
		// encoding stays UTF8.
		if out, err := run(Bin("initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "--encoding=UTF8", "--locale=C").CombinedOutput(); err != nil {
			return fmt.Errorf("initdb: %v: %s", err, out)
		}
		return nil
	})
}

// start is Start with create making the data directory when dir holds
// none (initdb, or a base backup of a primary).
func start(dir string, opts Options, create func(run func(string, ...string) *exec.Cmd, data string) error) (c *Cluster, err error) {
	initdb, pgCtl := Bin("initdb"), Bin("pg_ctl")
	for _, bin := range []string{initdb, pgCtl} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%s not found on PATH or under /usr/lib/postgresql/*/bin (install the postgresql package)", filepath.Base(bin))
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	run, err := runner(dir)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		if err := create(run, data); err != nil {
			return nil, err
		}
	} else if run(pgCtl, "-D", data, "status").Run() == nil {
		// Left running by a process that died: its port is unknown to us.
		if out, err := run(pgCtl, "-D", data, "-m", "fast", "-w", "stop").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pg_ctl stop (a server left running in %s): %v: %s", data, err, out)
		}
	}
	if err := trustNetworks(data, opts.Networks); err != nil {
		return nil, err
	}
	// Reserved, not merely free a moment ago: the port must stay free for
	// the first start and for every restart after a Stop (the fault tests
	// restart the server under load, when outgoing connections come and go).
	port, release, err := localport.Reserve()
	if err != nil {
		return nil, fmt.Errorf("reserve a port: %w", err)
	}
	socketDir := "''"
	if opts.Socket {
		socketDir = dir
	}
	maxConns := opts.MaxConnections
	if maxConns == 0 {
		maxConns = 300
	}
	listen := []string{"127.0.0.1"}
	for _, n := range opts.Networks {
		listen = append(listen, n.Addr().String())
	}
	settings := fmt.Sprintf("-c listen_addresses=%s -c port=%d -c unix_socket_directories=%s -c max_connections=%d", strings.Join(listen, ","), port, socketDir, maxConns)
	if opts.TrackStatements {
		settings += " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
	}
	switch {
	case opts.SynchronousStandby != "":
		settings += " -c synchronous_commit=on -c synchronous_standby_names=" + opts.SynchronousStandby
		if !opts.Durable {
			settings += " -c fsync=off -c full_page_writes=off"
		}
	case !opts.Durable:
		settings += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	c = &Cluster{
		Dir:         dir,
		Port:        port,
		URL:         fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		run:         run,
		settings:    settings,
		releasePort: release,
	}
	if err := c.Start(); err != nil {
		release()
		return nil, err
	}
	return c, nil
}

// trustNetworks adds a trust line for each network to the cluster's
// pg_hba.conf, unless it holds one already (a restart, a base backup).
func trustNetworks(data string, networks []netip.Prefix) error {
	if len(networks) == 0 {
		return nil
	}
	path := filepath.Join(data, "pg_hba.conf")
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read pg_hba.conf: %w", err)
	}
	var add strings.Builder
	for _, n := range networks {
		line := fmt.Sprintf("host all all %s trust\n", n.Masked())
		if !strings.Contains(string(raw), line) {
			add.WriteString(line)
		}
	}
	if add.Len() == 0 {
		return nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open pg_hba.conf: %w", err)
	}
	_, err = f.WriteString(add.String())
	return errors.Join(err, f.Close())
}

// Start starts the server again after Stop, on the same port and with the
// same settings (tests use it to restart Postgres under load).
func (c *Cluster) Start() error {
	logFile := filepath.Join(c.Dir, "log")
	if out, err := c.run(Bin("pg_ctl"), "-D", filepath.Join(c.Dir, "data"), "-o", c.settings, "-l", logFile, "-w", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("pg_ctl start: %v: %s %s", err, out, log)
	}
	return nil
}

// Stop shuts the server down (fast: open sessions are ended, data is kept).
func (c *Cluster) Stop() error {
	if out, err := c.run(Bin("pg_ctl"), "-D", filepath.Join(c.Dir, "data"), "-m", "fast", "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %v: %s", err, out)
	}
	return nil
}

// Remove shuts the server down at once and deletes Dir.
func (c *Cluster) Remove() error {
	var errs []error
	if out, err := c.run(Bin("pg_ctl"), "-D", filepath.Join(c.Dir, "data"), "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("pg_ctl stop: %v: %s", err, out))
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	if c.releasePort != nil {
		c.releasePort()
	}
	return errors.Join(errs...)
}

// runner returns how to run the server's commands: inside dir (as the
// postgres user the caller's working directory may be unreadable), and as
// root through runuser as the postgres user, with dir chowned to it.
func runner(dir string) (func(name string, args ...string) *exec.Cmd, error) {
	if os.Geteuid() != 0 {
		return func(name string, args ...string) *exec.Cmd {
			cmd := exec.Command(name, args...)
			cmd.Dir = dir
			return cmd
		}, nil
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres user to run the cluster as: %w", err)
	}
	uid, err := strconv.Atoi(pg.Uid)
	if err != nil {
		return nil, fmt.Errorf("postgres user: uid %q: %w", pg.Uid, err)
	}
	gid, err := strconv.Atoi(pg.Gid)
	if err != nil {
		return nil, fmt.Errorf("postgres user: gid %q: %w", pg.Gid, err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		return nil, fmt.Errorf("running as root: runuser is needed to run the cluster as the postgres user: %w", err)
	}
	// initdb would fail with a message about missing files: say what is
	// wrong instead.
	if err := exec.Command(runuser, "-u", "postgres", "--", "test", "-x", dir, "-a", "-w", dir).Run(); err != nil {
		return nil, fmt.Errorf("%w: %s (a folder above it is private to root; the server runs as postgres)", ErrUnreachable, dir)
	}
	return func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(runuser, append([]string{"-u", "postgres", "--", name}, args...)...)
		cmd.Dir = dir
		// root's HOME is not the postgres user's; nothing should read it.
		cmd.Env = append(os.Environ(), "HOME="+dir)
		return cmd
	}, nil
}

// Bin finds a PostgreSQL server binary: on PATH, else Debian's versioned
// directory (/usr/lib/postgresql/<version>/bin), newest version first.
func Bin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestVersion := name, -1
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || v <= bestVersion {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			best, bestVersion = filepath.Join(d, name), v
		}
	}
	return best
}
