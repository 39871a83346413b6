package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// cli runs chatd in-process with the given environment and arguments and
// returns its exit code and output.
func cli(t *testing.T, environ map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &env{
		stdout: &out,
		stderr: &errOut,
		getenv: func(k string) string { return environ[k] },
	})
	return code, out.String(), errOut.String()
}

func TestUsage(t *testing.T) {
	t.Parallel()

	code, stdout, _ := cli(t, nil, "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "Usage: chatd <command>")
	for _, c := range commands() {
		require.Contains(t, stdout, c.name)
	}

	code, _, stderr := cli(t, nil)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "chatd: missing command.")

	code, _, stderr = cli(t, nil, "frobnicate")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `chatd: unknown command "frobnicate".`)
	require.Contains(t, stderr, "Usage: chatd <command>")
}
