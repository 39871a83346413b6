// Package localport reserves a loopback TCP port for a child process to
// listen on: one that no outgoing connection, no ":0" listener and no
// other process reserving through this package is given while it is held.
//
// Picking a port by listening on 127.0.0.1:0 and closing again leaves it
// free only for a moment: before the child binds it (a build may run in
// between, or a database restart), any process's outgoing connection may
// take it as its local port, or another test binary may pick it again;
// the child then fails to listen, or a health check reaches a stranger's
// server on it. A reserved port comes from outside the kernel's ephemeral
// range, and a lock file per port (flock, dropped by the kernel however
// the holder exits) keeps the processes of one user apart.
package localport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
)

// reservedPorts is the range Reserve draws from; see portRange.
var reservedPorts = portRange()

// nextPort spreads this process's reservations over the range from a
// random start, so that processes reserving at the same time rarely try
// the same ports first.
var nextPort atomic.Uint32

func init() { nextPort.Store(rand.Uint32()) }

type ports struct{ first, count int }

// portRange is the 8,000 ports below the kernel's ephemeral range, or
// above it when it starts too low to leave room.
func portRange() ports {
	lo, hi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var l, h int
		if _, err := fmt.Sscan(string(b), &l, &h); err == nil {
			lo, hi = l, h
		}
	}
	const want = 8000
	if lo-want >= 10000 {
		return ports{first: lo - want, count: want}
	}
	return ports{first: hi + 1, count: min(want, 65535-hi)}
}

// Reserve returns a free 127.0.0.1 port and the function that gives it
// back; the caller holds it until then (or until its process exits).
func Reserve() (port int, release func(), err error) {
	if reservedPorts.count <= 0 {
		return 0, nil, errors.New("no room for reserved ports outside the ephemeral range")
	}
	// One directory per user: another user's lock files would not open.
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("chatd-test-ports-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, nil, fmt.Errorf("create the port lock directory: %w", err)
	}
	for range reservedPorts.count {
		port = reservedPorts.first + int(nextPort.Add(1)%uint32(reservedPorts.count))
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
