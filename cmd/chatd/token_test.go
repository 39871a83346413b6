package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
)

const testSecret = "0123456789abcdef0123456789abcdef"

// verifyPrinted checks that stdout is one line holding a token the
// Verifier accepts, and returns its claims.
func verifyPrinted(t *testing.T, stdout, secret string) auth.Claims {
	t.Helper()
	require.True(t, strings.HasSuffix(stdout, "\n"))
	tok := strings.TrimSuffix(stdout, "\n")
	require.NotContains(t, tok, "\n")
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(secret)})
	require.NoError(t, err)
	c, err := v.Verify(context.Background(), tok)
	require.NoError(t, err)
	return c
}

func TestTokenEndToEnd(t *testing.T) {
	t.Parallel()
	sub, org := uuid.NewString(), uuid.NewString()
	environ := map[string]string{auth.EnvSecret: testSecret}

	code, stdout, stderr := cli(t, environ, "token", "--sub", sub, "--org", org)
	require.Equal(t, exitOK, code, stderr)
	require.Empty(t, stderr)
	c := verifyPrinted(t, stdout, testSecret)
	require.Equal(t, sub, c.UserID.String())
	require.Equal(t, org, c.OrganizationID.String())
	require.False(t, c.Admin)
	require.WithinDuration(t, time.Now().Add(30*24*time.Hour), c.ExpiresAt, time.Minute)

	code, stdout, stderr = cli(t, environ, "token", "--sub="+strings.ToUpper(sub), "--org", org, "--admin", "--ttl", "90m")
	require.Equal(t, exitOK, code, stderr)
	c = verifyPrinted(t, stdout, testSecret)
	require.Equal(t, sub, c.UserID.String())
	require.True(t, c.Admin)
	require.WithinDuration(t, time.Now().Add(90*time.Minute), c.ExpiresAt, time.Minute)

	code, stdout, stderr = cli(t, environ, "token", "--sub", sub, "--org", org, "--ttl", "2d")
	require.Equal(t, exitOK, code, stderr)
	c = verifyPrinted(t, stdout, testSecret)
	require.WithinDuration(t, time.Now().Add(48*time.Hour), c.ExpiresAt, time.Minute)

	// --secret overrides the environment.
	other := strings.Repeat("s", 40)
	code, stdout, stderr = cli(t, environ, "token", "--sub", sub, "--org", org, "--secret", other)
	require.Equal(t, exitOK, code, stderr)
	verifyPrinted(t, stdout, other)
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(testSecret)})
	require.NoError(t, err)
	_, err = v.Verify(context.Background(), strings.TrimSpace(stdout))
	require.ErrorIs(t, err, auth.ErrInvalidToken)
}

// TestTokenScope: --scope limits the token (its scope claim); the default
// is the full scope, written as no claim.
func TestTokenScope(t *testing.T) {
	t.Parallel()
	environ := map[string]string{auth.EnvSecret: testSecret}
	code, stdout, stderr := cli(t, environ, "token", "--sub", uuid.NewString(), "--org", uuid.NewString(), "--scope", "chat_model_config:read")
	require.Equal(t, exitOK, code, stderr)
	c := verifyPrinted(t, stdout, testSecret)
	require.Equal(t, []auth.Scope{auth.ScopeModelConfigRead}, c.Scopes)
	require.False(t, c.Full())

	for _, args := range [][]string{nil, {"--scope", "all"}} {
		code, stdout, stderr = cli(t, environ, append([]string{"token", "--sub", uuid.NewString(), "--org", uuid.NewString()}, args...)...)
		require.Equal(t, exitOK, code, stderr)
		c = verifyPrinted(t, stdout, testSecret)
		require.Empty(t, c.Scopes, "%v", args)
		require.True(t, c.Full(), "%v", args)
	}
}

func TestTokenErrors(t *testing.T) {
	t.Parallel()
	sub, org := uuid.NewString(), uuid.NewString()
	environ := map[string]string{auth.EnvSecret: testSecret}
	noDevStack := map[string]string{"CHATD_DEV_DATA_DIR": t.TempDir()}
	for name, tc := range map[string]struct {
		environ map[string]string
		args    []string
		want    string
	}{
		"no secret":    {noDevStack, []string{"--sub", sub, "--org", org}, "chatd token: no secret: set CHATD_AUTH_SECRET, pass --secret, or run chatd dev (make dev) once in this checkout, which keeps one in " + noDevStack["CHATD_DEV_DATA_DIR"] + "/identity.json.\n"},
		"short secret": {map[string]string{auth.EnvSecret: "hunter2"}, []string{"--sub", sub, "--org", org}, "chatd token: the secret is 7 bytes long; it must be at least 32 (for example: openssl rand -hex 32).\n"},
		"bad sub":      {environ, []string{"--sub", "alice", "--org", org}, `chatd token: --sub "alice" is not a UUID; it must be the user's UUID, such as `},
		"nil org":      {environ, []string{"--sub", sub, "--org", uuid.Nil.String()}, `chatd token: --org "00000000-0000-0000-0000-000000000000" is not a UUID; it must be the organization's UUID`},
		"bad ttl":      {environ, []string{"--sub", sub, "--org", org, "--ttl", "forever"}, `chatd token: --ttl "forever" is not a duration such as 720h, 90m or 30d.` + "\n"},
		"zero ttl":     {environ, []string{"--sub", sub, "--org", org, "--ttl", "0s"}, `chatd token: --ttl "0s" is not positive.` + "\n"},
		"extra arg":    {environ, []string{"--sub", sub, "--org", org, "now"}, `chatd token: unexpected argument "now".` + "\n"},
		"bad flag":     {environ, []string{"--user", sub}, "chatd token: flag provided but not defined: -user.\n"},
		"bad scope":    {environ, []string{"--sub", sub, "--org", org, "--scope", "root"}, `chatd token: --scope unknown scope "root" (know all, chat_model_config:read).` + "\n"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := cli(t, tc.environ, append([]string{"token"}, tc.args...)...)
			require.Equal(t, exitUsage, code)
			require.Empty(t, stdout)
			require.True(t, strings.HasPrefix(stderr, tc.want), "stderr: %s", stderr)
			require.Contains(t, stderr, "Usage: chatd token [--sub <user-uuid>] [--org <org-uuid>]")
			require.NotContains(t, stderr, testSecret)
		})
	}

	code, stdout, _ := cli(t, nil, "token", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "Usage: chatd token")
	require.Contains(t, stdout, "--ttl")
	require.Contains(t, stdout, auth.EnvSecret)
}

// TestTokenInADevCheckout: with no arguments and no CHATD_AUTH_SECRET,
// `chatd token` signs with the dev stack's secret for a new user in a new
// organization, and says so on standard error.
func TestTokenInADevCheckout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "identity.json"),
		[]byte(`{"auth_secret":"`+testSecret+`","user_id":"`+uuid.NewString()+`","organization_id":"`+uuid.NewString()+`"}`), 0o600))
	code, stdout, stderr := cli(t, map[string]string{"CHATD_DEV_DATA_DIR": dir}, "token")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "for a new user ")
	require.Contains(t, stderr, "in a new organization ")
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(testSecret)})
	require.NoError(t, err)
	claims, err := v.Verify(context.Background(), strings.TrimSpace(stdout))
	require.NoError(t, err)
	require.NotEqual(t, uuid.Nil, claims.UserID)
	require.NotEqual(t, uuid.Nil, claims.OrganizationID)
	require.Contains(t, stderr, claims.UserID.String())

	// Two calls: two users.
	_, again, _ := cli(t, map[string]string{"CHATD_DEV_DATA_DIR": dir}, "token")
	other, err := v.Verify(context.Background(), strings.TrimSpace(again))
	require.NoError(t, err)
	require.NotEqual(t, claims.UserID, other.UserID)
}
