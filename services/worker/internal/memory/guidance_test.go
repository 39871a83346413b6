package memory_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/memory"
)

// TestGuidance: only a root chat in a project gets the memory guidance
// block, appended after its own system prompt.
func TestGuidance(t *testing.T) {
	t.Parallel()
	project, parent := uuid.New(), uuid.New()
	root := queries.Chat{ProjectID: &project}
	sub := queries.Chat{ProjectID: &project, ParentChatID: &parent}

	g := memory.Guidance(root)
	require.True(t, strings.HasPrefix(g, memory.GuidanceHeading), g)
	for _, tool := range []string{memory.ToolRead, memory.ToolSave, memory.ToolDelete} {
		require.Contains(t, g, tool)
	}
	require.Empty(t, memory.Guidance(queries.Chat{}), "a chat outside a project")
	require.Empty(t, memory.Guidance(sub), "a subagent")

	require.Equal(t, "You are terse.\n\n"+g, memory.WithGuidance("You are terse.", root))
	require.Equal(t, g, memory.WithGuidance("", root))
	require.Equal(t, "You are terse.", memory.WithGuidance("You are terse.", sub))
}
