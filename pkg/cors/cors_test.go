package cors_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/cors"
)

func TestParse(t *testing.T) {
	t.Parallel()
	p, err := cors.Parse("")
	require.NoError(t, err)
	require.False(t, p.Enabled(), "empty is off")
	p, err = cors.Parse(" https://a.example , http://localhost:3000,*")
	require.NoError(t, err)
	require.True(t, p.Enabled())
	for _, bad := range []string{"a.example", "https://a.example/path", "ftp://a.example", "https://u:p@a.example", "https://a.example?x=1"} {
		_, err := cors.Parse(bad)
		require.Error(t, err, bad)
	}
}
