package servicetest

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFreeAddrIsListenable(t *testing.T) {
	addr := FreeAddr(t)
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	require.NoError(t, l.Close())
}
