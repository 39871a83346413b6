package chatapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCleanTitle(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Lisbon trip plan":                      "Lisbon trip plan",
		"\n\n  \"Lisbon   trip plan.\"  \nmore": "Lisbon trip plan",
		"# **Release notes**":                   "Release notes",
		"'Quoted'":                              "Quoted",
		"“Curly”.":                              "Curly",
		"   \n  ":                               "",
		`""`:                                    "",
	} {
		require.Equal(t, want, cleanTitle(in), "%q", in)
	}
	long := cleanTitle(strings.Repeat("word ", 40))
	require.True(t, strings.HasSuffix(long, "…"), long)
	require.LessOrEqual(t, len([]rune(long)), fallbackTitleLen+1)
}
