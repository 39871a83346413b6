package localport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReserveGivesDistinctPortsOutsideTheEphemeralRange: the ports
// are this test's until it ends (no second reservation gets one, even
// from the same process), none is one the kernel hands to outgoing
// connections, and a port something listens on is passed over.
func TestReserveGivesDistinctPortsOutsideTheEphemeralRange(t *testing.T) {
	r := reservedPorts
	inRange := func(port int) bool { return port >= r.first && port < r.first+r.count }

	// Something else listens on the port the next reservation would try.
	next := r.first + int((nextPort.Load()+1)%uint32(r.count))
	busy, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(next)))
	if err == nil {
		defer busy.Close()
	}

	seen := map[int]bool{}
	var reserved []int
	var releases []func()
	for range 50 {
		port, release, err := Reserve()
		require.NoError(t, err)
		require.True(t, inRange(port), "port %d is outside %d+%d", port, r.first, r.count)
		require.False(t, seen[port], "port %d was reserved twice", port)
		if busy != nil {
			require.NotEqual(t, next, port, "a port with a listener was reserved")
		}
		seen[port] = true
		reserved = append(reserved, port)
		releases = append(releases, release)
	}
	for _, release := range releases {
		release()
	}

	// Released, a port can be reserved again.
	nextPort.Store(uint32(reserved[0] - r.first - 1))
	port, release, err := Reserve()
	require.NoError(t, err)
	defer release()
	require.Equal(t, reserved[0], port)
}
