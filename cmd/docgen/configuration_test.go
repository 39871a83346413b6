package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The committed page is what the declared settings render to now: a
// setting added, removed or reworded without regenerating fails here.
func TestConfigurationPageIsCurrent(t *testing.T) {
	t.Parallel()
	root, err := repoRoot()
	require.NoError(t, err)
	want, err := renderConfiguration()
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(root, configurationPage))
	require.NoError(t, err)
	if string(got) != string(want) {
		t.Fatalf("%s is stale: the services' declared settings (or cmd/docgen/configuration.md.tmpl) changed.\n"+
			"Regenerate it from the repository root with\n\n\t%s\n\nand commit the result.", configurationPage, regenerate)
	}
}

// Every declared setting of every service reaches the table, with its
// default as --help prints it.
func TestSettingsTableHasEverySetting(t *testing.T) {
	t.Parallel()
	table, err := settingsTable()
	require.NoError(t, err)
	for _, p := range programs() {
		settings, err := declared(p)
		require.NoError(t, err)
		require.NotEmpty(t, settings, p.Name)
		for _, s := range settings {
			require.Contains(t, table, "| `"+s.Env+"` (`"+s.Flag+"`) |", "%s's %s", p.Name, s.Env)
		}
	}
	require.Contains(t, table, "| `CHATD_GRPC_ADDR` (`--grpc-addr`) | `:7001` | `:7002` | `:7003` | `:7004` |")
	require.Contains(t, table, "| `CHATD_AUTH_SECRET` (`--auth-secret`) | secret | — | secret | — |")
	require.Contains(t, table, "| `CHATD_DATABASE_URL` (`--database-url`) | none | none | none | none |")
}

func TestParseUsage(t *testing.T) {
	t.Parallel()
	help := "Usage: chatd-x [flags]\n\nsummary\n\n" +
		"  CHATD_A, --a (default \"x \\\"y\\\"\")\n        First.\n" +
		"  CHATD_B, --b (no default)\n        Second.\n" +
		"  CHATD_C, --c (secret, no default)\n        Third.\n"
	got, err := parseUsage(help)
	require.NoError(t, err)
	require.Equal(t, []setting{
		{Env: "CHATD_A", Flag: "--a", Default: `x "y"`, Usage: "First."},
		{Env: "CHATD_B", Flag: "--b", NoDefault: true, Usage: "Second."},
		{Env: "CHATD_C", Flag: "--c", Secret: true, Usage: "Third."},
	}, got)

	_, err = parseUsage("  CHATD_A, --a (sometimes)\n        First.\n")
	require.ErrorContains(t, err, "cannot read the default of CHATD_A")
	_, err = parseUsage("  CHATD_A, --a (no default)\n")
	require.ErrorContains(t, err, "CHATD_A has no meaning line")
}
