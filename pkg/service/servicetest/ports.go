package servicetest

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/localport"
)

// FreeAddr returns a 127.0.0.1 address for a child process to listen on,
// reserved for this test's lifetime (localport.Reserve says why a port
// merely free a moment ago is not enough).
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, release, err := localport.Reserve()
	require.NoError(t, err)
	t.Cleanup(release)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
