package toolargs_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/toolargs"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"maxLines":{"type":"integer"}}}`)
	cases := []struct {
		args    string
		wantErr string
	}{
		{`{"path":"a","maxLines":3}`, ""},
		{``, ""},
		{`{}`, ""},
		{`{"path":"a","path":"b"}`, `repeat the key "path"`},
		{`{"opts":{"x":1,"x":2}}`, `repeat the key "x" in opts`},
		{`{"list":[{"y":1},{"y":1,"y":2}]}`, `repeat the key "y" in list[1]`},
		{`{"Path":"a"}`, `"Path" should be spelled "path"`},
		{`{"maxlines":3}`, `should be spelled "maxLines"`},
		{`{"extra":1}`, ""}, // unknown keys are the tool's business
		{`[1,2]`, "must be a JSON object"},
		{`{"path":`, "not valid JSON"},
		{`{"path":"a"} {}`, "data after"},
	}
	for _, c := range cases {
		err := toolargs.Check(json.RawMessage(c.args), schema)
		if c.wantErr == "" {
			require.NoError(t, err, c.args)
			continue
		}
		require.ErrorContains(t, err, c.wantErr, c.args)
	}
	// Without a schema only duplicates are checked.
	require.NoError(t, toolargs.Check(json.RawMessage(`{"Path":"a"}`), nil))
}
