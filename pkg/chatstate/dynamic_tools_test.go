package chatstate_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

func TestSameDynamicTools(t *testing.T) {
	t.Parallel()
	same := func(a, b string) bool {
		ok, err := chatstate.SameDynamicTools(json.RawMessage(a), json.RawMessage(b))
		require.NoError(t, err)
		return ok
	}
	require.True(t, same(`[{"name":"f","input_schema":{"type":"object"}}]`, `[{"input_schema": {"type": "object"}, "name": "f"}]`), "key order and spacing")
	require.True(t, same(``, `[]`), "none either way")
	require.False(t, same(`[{"name":"f"}]`, `[{"name":"g"}]`))
	require.False(t, same(`[{"name":"f"},{"name":"g"}]`, `[{"name":"g"},{"name":"f"}]`), "order is the model's order")
	_, err := chatstate.SameDynamicTools(json.RawMessage(`{`), json.RawMessage(`[]`))
	require.Error(t, err)
}
