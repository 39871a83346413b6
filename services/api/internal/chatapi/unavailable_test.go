package chatapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// TestTransientDatabaseFailureIsUnavailable: a request that meets a
// transient database failure (here a row lock held past lock_timeout) is
// answered 503 TRY_AGAIN with Retry-After and a sentence, not a 500, and
// nothing was applied: the same request succeeds once the lock is gone.
func TestTransientDatabaseFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	a := setup(t, func(c *chatapi.AppConfig) { c.DB.LockTimeout = 200 * time.Millisecond })
	id := a.reach(chatstate.W, false)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	userMessages := func() (n int) {
		require.NoError(t, a.pool.QueryRow(ctx, "SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND role = 'user'", id).Scan(&n))
		return n
	}
	before := userMessages()
	tx, err := a.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM chats WHERE id = $1 FOR UPDATE", id)
	require.NoError(t, err)

	path := "/api/v2/chats/" + id.String() + "/messages"
	r := a.call("POST", path, a.user.token, map[string]any{"content": textContent("::reply ok")})
	require.Equal(t, http.StatusServiceUnavailable, r.code, "%s", r.raw)
	require.Equal(t, "TRY_AGAIN", r.str("reason"))
	require.Equal(t, "unavailable", r.str("code"))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Contains(t, r.str("message"), "Retry it")
	require.NotContains(t, r.str("message"), "lock")

	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, before, userMessages(), "the refused request stored nothing")
	r = a.call("POST", path, a.user.token, map[string]any{"content": textContent("::reply ok")})
	require.Equal(t, 2, r.code/100, "the retry is applied: %s", r.raw)
	require.Equal(t, before+1, userMessages(), "the retry stored one message")
}
