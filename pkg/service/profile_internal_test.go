package service

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCPUProfileIsWrittenWhenAsked(t *testing.T) {
	dir := t.TempDir()
	env := func(k string) (string, bool) {
		if k == CPUProfileEnv {
			return dir, true
		}
		return "", false
	}
	var stderr bytes.Buffer
	stop := startCPUProfile("stream", env, &stderr)
	stop()
	require.Empty(t, stderr.String())
	files, err := filepath.Glob(filepath.Join(dir, "stream-*.pprof"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	data, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(data, []byte{0x1f, 0x8b}), "a gzipped profile")
}

func TestCPUProfileIsOffByDefaultAndReportsAMissingDirectory(t *testing.T) {
	var stderr bytes.Buffer
	startCPUProfile("api", func(string) (string, bool) { return "", false }, &stderr)()
	require.Empty(t, stderr.String())

	missing := filepath.Join(t.TempDir(), "gone")
	startCPUProfile("api", func(string) (string, bool) { return missing, true }, &stderr)()
	require.Contains(t, stderr.String(), "chatd-api: no CPU profile:")
}
