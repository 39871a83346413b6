package servicetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// FreeAddr returns a 127.0.0.1 address for a child process to listen on,
// reserved for this test's lifetime against every other test process on
// the machine that reserves through FreeAddr.
//
// A port the kernel picks for 127.0.0.1:0 and that is then closed again
// is free only for a moment: between the pick and the child's bind (a
// build may run in between) any process's outgoing connection may take
// it as its local port, or another test binary's FreeAddr may hand it
// out again. The child then fails to listen, or, worse, a health check
// reaches a stranger's server on that port and the test goes on with a
// dead service. So the port comes from outside the kernel's ephemeral
// range (no outgoing connection and no :0 listener is given one there),
// and a lock file per port (flock, dropped by the kernel when the test
// process exits, however it exits) keeps concurrent test binaries apart.
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, release, err := reservePort()
	require.NoError(t, err)
	t.Cleanup(release)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// reservedPorts is the range FreeAddr draws from; see portRange.
var reservedPorts = portRange()

// nextPort spreads this process's reservations over the range from a
// random start, so that concurrent test binaries rarely try the same
// ports first.
var nextPort atomic.Uint32

func init() { nextPort.Store(rand.Uint32()) }

type ports struct{ first, count int }

// portRange is the 8,000 ports below the kernel's ephemeral range, or
// above it when it starts too low to leave room.
func portRange() ports {
	lo, hi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if l, err := strconv.Atoi(f[0]); err == nil {
				if h, err := strconv.Atoi(f[1]); err == nil {
					lo, hi = l, h
				}
			}
		}
	}
	const want = 8000
	if lo-want >= 10000 {
		return ports{first: lo - want, count: want}
	}
	return ports{first: hi + 1, count: min(want, 65535-hi)}
}

// reservePort locks a port's file and checks that nothing listens on it.
func reservePort() (int, func(), error) {
	if reservedPorts.count <= 0 {
		return 0, nil, errors.New("no room for test ports outside the ephemeral range")
	}
	// One directory per user: another user's lock files would not open.
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("chatd-test-ports-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, nil, fmt.Errorf("create the port lock directory: %w", err)
	}
	for range reservedPorts.count {
		port := reservedPorts.first + int(nextPort.Add(1)%uint32(reservedPorts.count))
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return 0, nil, fmt.Errorf("open the lock of port %d: %w", port, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close() // another test process holds it
			continue
		}
		// Anything else on the machine may listen there.
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			f.Close()
			continue
		}
		l.Close()
		return port, func() { f.Close() }, nil
	}
	return 0, nil, fmt.Errorf("every port in %d-%d is taken", reservedPorts.first, reservedPorts.first+reservedPorts.count-1)
}
