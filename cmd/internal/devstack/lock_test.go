package devstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSecondStackIsRefused: while one stack holds the data directory, a
// second is refused with a message naming the first; once the first is
// gone the directory is free again.
func TestSecondStackIsRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := lockDataDir(dir)
	require.NoError(t, err)
	first.record("http://127.0.0.1:8080")

	_, err = lockDataDir(dir)
	require.ErrorIs(t, err, errAlreadyRunning)
	require.Contains(t, err.Error(), "pid ")
	require.Contains(t, err.Error(), "serving http://127.0.0.1:8080")
	require.Contains(t, err.Error(), "--data")

	first.release()
	second, err := lockDataDir(dir)
	require.NoError(t, err)
	second.release()
}

// TestLockOfADeadHolderIsFree: a holder killed with SIGKILL leaves the lock
// file behind but not the lock.
func TestLockOfADeadHolderIsFree(t *testing.T) {
	flock, err := exec.LookPath("flock")
	require.NoError(t, err, "util-linux's flock holds the lock in another process")
	dir := t.TempDir()
	// flock(1) takes the same kind of lock (flock(2)) and, without forking,
	// becomes the waiting shell: killing it kills the only holder.
	holder := exec.Command(flock, "--exclusive", "--no-fork", filepath.Join(dir, lockFile), "sh", "-c", "echo locked; exec sleep 600")
	out, err := holder.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, holder.Start())
	buf := make([]byte, len("locked"))
	_, err = out.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "locked", string(buf))

	_, err = lockDataDir(dir)
	require.ErrorIs(t, err, errAlreadyRunning, "the live holder keeps the directory")

	require.NoError(t, holder.Process.Signal(os.Kill))
	_ = holder.Wait()
	l, err := lockDataDir(dir)
	require.NoError(t, err, "the dead holder's lock is released by the kernel")
	l.release()
}

// TestClusterOutsideAPrivateFolder: as root with a data directory the
// postgres user cannot enter, the cluster goes to a directory it can.
func TestClusterOutsideAPrivateFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the cluster as another user")
	}
	private := t.TempDir() // 0700, owned by root
	require.NoError(t, os.Chmod(private, 0o700))
	dataDir := filepath.Join(private, ".chatd")
	require.NoError(t, os.MkdirAll(dataDir, 0o755))
	cfg := Config{DataDir: dataDir}
	cfg.defaults()
	url, stop, err := database(cfg)
	require.NoError(t, err)
	defer func() {
		stop()
		require.NoError(t, os.RemoveAll(filepath.Dir(fallbackClusterDir(cfg.DataDir))))
	}()
	require.NotEmpty(t, url)
	_, err = os.Stat(filepath.Join(fallbackClusterDir(cfg.DataDir), "data", "PG_VERSION"))
	require.NoError(t, err, "the cluster lives under %s", fallbackClusterRoot)
}

// TestServingURL: clients read where the running stack serves from its
// lock file, only while the lock is held.
func TestServingURL(t *testing.T) {
	dir := t.TempDir()
	_, err := ServingURL(dir)
	require.ErrorIs(t, err, ErrNotRunning, "no lock file")

	l, err := lockDataDir(dir)
	require.NoError(t, err)
	_, err = ServingURL(dir)
	require.ErrorIs(t, err, ErrStarting, "held, no address yet")
	l.record("http://127.0.0.1:18080")
	url, err := ServingURL(dir)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:18080", url)

	l.release()
	_, err = ServingURL(dir)
	require.ErrorIs(t, err, ErrNotRunning, "a stopped stack's file names an address nobody serves")
}
