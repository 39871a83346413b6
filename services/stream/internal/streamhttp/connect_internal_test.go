package streamhttp

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/auth"
)

// TestConnectCacheExpiry: a verified token is remembered no longer than
// the TTL nor past its own exp, a refused one not at all, and an owner
// check only for the TTL and only for the exact (user, organization,
// chat).
func TestConnectCacheExpiry(t *testing.T) {
	t.Parallel()
	const key = "a-secret-of-at-least-thirty-two-bytes!!"
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(key)})
	require.NoError(t, err)
	signer, err := auth.NewSigner([]byte(key))
	require.NoError(t, err)
	now := time.Now()
	c := newConnectCache(time.Hour)
	c.now = func() time.Time { return now }
	claims := auth.Claims{UserID: uuid.New(), OrganizationID: uuid.New()}
	short, err := signer.Sign(claims, time.Minute)
	require.NoError(t, err)
	got, err := c.verify(context.Background(), v, short)
	require.NoError(t, err)
	require.Equal(t, claims.UserID, got.UserID)
	require.Equal(t, got.ExpiresAt, c.tokens[short].expires, "never past the token's exp")

	_, err = c.verify(context.Background(), v, short+"x")
	require.Error(t, err)
	require.NotContains(t, c.tokens, short+"x", "a refused token is not remembered")

	// Served from the cache until its entry expires, then verified again.
	c.tokens[short] = tokenEntry{claims: auth.Claims{UserID: uuid.New()}, expires: now.Add(time.Second)}
	got, err = c.verify(context.Background(), v, short)
	require.NoError(t, err)
	require.NotEqual(t, claims.UserID, got.UserID, "the remembered claims")
	now = now.Add(2 * time.Second)
	got, err = c.verify(context.Background(), v, short)
	require.NoError(t, err)
	require.Equal(t, claims.UserID, got.UserID, "verified again once expired")

	chat := uuid.New()
	c.owns(got, chat)
	require.True(t, c.ownerChecked(got, chat))
	require.False(t, c.ownerChecked(auth.Claims{UserID: got.UserID, OrganizationID: uuid.New()}, chat), "another organization")
	require.False(t, c.ownerChecked(got, uuid.New()), "another chat")
	now = now.Add(time.Hour + time.Second)
	require.False(t, c.ownerChecked(got, chat), "expired")
}
