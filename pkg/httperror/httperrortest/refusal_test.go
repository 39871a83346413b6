package httperrortest_test

import (
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/httperror/httperrortest"
)

// recorder is a testing.TB that records a failure instead of failing.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(string, ...any) {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}

func (r *recorder) FailNow() {
	r.Errorf("")
	runtime.Goexit()
}

// fails reports whether RequireWorded refuses the answer.
func fails(t *testing.T, status int, body string) bool {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		httperrortest.RequireWorded(r, "GET /x", status, []byte(body))
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func TestRequireWorded(t *testing.T) {
	t.Parallel()
	require.False(t, fails(t, 200, `{"id":"x"}`), "a success")
	require.False(t, fails(t, 400, `{"reason":"INVALID_ARGUMENT","message":"The title is too long."}`), "a worded refusal")
	require.True(t, fails(t, 500, `{"reason":"INTERNAL","message":"could not read the chat"}`), "a 5xx")
	require.True(t, fails(t, 400, `400 bad request`), "a refusal that is not JSON")
	require.True(t, fails(t, 404, `{"message":"The chat was not found."}`), "no reason")
	require.True(t, fails(t, 400, `{"reason":"INVALID_ARGUMENT","message":""}`), "no message")
	require.True(t, fails(t, 400, `{"reason":"INVALID_ARGUMENT","message":"invalid character 'A' looking for beginning of value"}`), "a parser's words")
	require.True(t, fails(t, 409, `{"reason":"ABORTED","message":"ERROR: deadlock detected (SQLSTATE 40P01)"}`), "the database's words")
}
