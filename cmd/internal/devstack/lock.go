package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// lockFile is the data directory's lock, held by the running stack.
const lockFile = "dev.lock"

// errAlreadyRunning is returned when another chatd dev holds the data
// directory.
var errAlreadyRunning = errors.New("another chatd dev is running with this data directory")

// dataDirLock is the held lock on DataDir/dev.lock. The kernel releases a
// flock when its holder dies, however it dies, so a lock file left by a
// crashed run never blocks the next one, and a live holder is never taken
// for a dead one (its Postgres is never stopped from under it).
type dataDirLock struct {
	f *os.File
}

// lockDataDir takes the lock or says who holds it.
func lockDataDir(dir string) (*dataDirLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder, _ := os.ReadFile(path)
			return nil, fmt.Errorf("%w (%s): stop it first, or pass --data (CHATD_DEV_DATA_DIR) to run a second stack elsewhere",
				errAlreadyRunning, describeHolder(string(holder), dir))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l := &dataDirLock{f: f}
	l.record("")
	return l, nil
}

// describeHolder turns the lock file's lines into a phrase.
func describeHolder(holder, dir string) string {
	var parts []string
	for _, line := range strings.Split(strings.TrimSpace(holder), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, line)
		}
	}
	parts = append(parts, "data "+dir)
	return strings.Join(parts, ", ")
}

// record writes who holds the lock (and, once known, where it serves) for
// the message a second run prints.
func (l *dataDirLock) record(url string) {
	text := fmt.Sprintf("pid %d\nsince %s\n", os.Getpid(), time.Now().Format(time.RFC3339))
	if url != "" {
		text += "serving " + url + "\n"
	}
	_ = l.f.Truncate(0)
	_, _ = l.f.WriteAt([]byte(text), 0)
}

// ErrNotRunning: no dev stack holds the data directory's lock.
var ErrNotRunning = errors.New("no dev stack is running")

// ErrStarting: a dev stack holds the data directory but has not yet
// recorded where it serves (it records that once it answers).
var ErrStarting = errors.New("the dev stack is still starting")

// ServingURL is the base URL the dev stack running with data directory dir
// serves at, as it recorded it in its lock file. Only a held lock is read:
// a file left by a stopped stack names an address nobody serves.
func ServingURL(dir string) (string, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", ErrNotRunning
	}
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return "", ErrNotRunning
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return "", fmt.Errorf("lock %s: %w", path, err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if url, ok := strings.CutPrefix(strings.TrimSpace(line), "serving "); ok && url != "" {
			return url, nil
		}
	}
	return "", ErrStarting
}

// release drops the lock (the file stays; its content is stale but only
// read while someone holds the lock).
func (l *dataDirLock) release() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}
