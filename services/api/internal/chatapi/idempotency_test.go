package chatapi_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIdempotentSend: ten concurrent identical sends make exactly one
// message, one 201 and nine 200s with the same body; reusing the ID with
// different input is a 409.
func TestIdempotentSend(t *testing.T) {
	t.Parallel()
	a := setup(t)
	id := a.createChat("hello")
	path := "/api/v2/chats/" + id.String() + "/messages"
	body := map[string]any{"content": textContent("exactly once"), "request_id": "req-1"}

	var wg sync.WaitGroup
	results := make([]response, 10)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = a.call("POST", path, a.user.token, body)
		}()
	}
	wg.Wait()
	createdN := 0
	for _, r := range results {
		switch r.code {
		case http.StatusCreated:
			createdN++
		case http.StatusOK:
		default:
			t.Fatalf("unexpected %d: %s", r.code, r.raw)
		}
		require.JSONEq(t, string(results[0].raw), string(r.raw), "every answer is the original result")
	}
	require.Equal(t, 1, createdN)
	var n int
	require.NoError(t, a.pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM chat_queued_messages WHERE chat_id = $1 AND content->0->>'text' = 'exactly once')
		     + (SELECT count(*) FROM chat_messages WHERE chat_id = $1 AND content->0->>'text' = 'exactly once')`, id).Scan(&n))
	require.Equal(t, 1, n, "exactly one message")

	r := a.call("POST", path, a.user.token, map[string]any{"content": textContent("different"), "request_id": "req-1"})
	require.Equal(t, http.StatusConflict, r.code, "%s", r.raw)
	require.Contains(t, r.str("message"), "request_id")
}

// TestIdempotentCreate: concurrent identical creates make one chat.
func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	a := setup(t)
	body := map[string]any{"content": textContent("hello"), "request_id": "create-1"}
	var wg sync.WaitGroup
	results := make([]response, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = a.call("POST", "/api/v2/chats", a.user.token, body)
		}()
	}
	wg.Wait()
	createdN := 0
	for _, r := range results {
		require.Contains(t, []int{200, 201}, r.code, "%s", r.raw)
		if r.code == 201 {
			createdN++
		}
		require.Equal(t, results[0].str("id"), r.str("id"))
	}
	require.Equal(t, 1, createdN)
	var chats int
	require.NoError(t, a.pool.QueryRow(context.Background(), "SELECT count(*) FROM chats WHERE owner_id = $1", a.user.id).Scan(&chats))
	require.Equal(t, 1, chats)

	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("other"), "request_id": "create-1"})
	require.Equal(t, http.StatusConflict, r.code)
}
