package chatapi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/modelconfig"
)

// TestUnsupportedProviderTypes: model discovery reports each provider type
// this build cannot open once, sorted, and an empty list (never null) when
// it can open them all.
func TestUnsupportedProviderTypes(t *testing.T) {
	var every []modelconfig.Descriptor
	for _, pt := range modelconfig.ProviderTypes {
		every = append(every, modelconfig.Descriptor{Type: pt})
	}
	require.Equal(t, []string{}, unsupportedTypes(every), "this build opens every known type")
	require.Equal(t, []string{}, unsupportedTypes(nil))

	stored := append(every,
		modelconfig.Descriptor{Type: "vertex"}, modelconfig.Descriptor{Type: "bedrock"}, modelconfig.Descriptor{Type: "vertex"})
	require.Equal(t, []string{"bedrock", "vertex"}, unsupportedTypes(stored))
}
