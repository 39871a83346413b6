package fantasyprovider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// The provider transport checks the address it dials: a base URL that got
// past the stored check (here built directly; in production a name that
// resolves to it later) never connects to the metadata address.
func TestProviderTransportRefusesMetadataAddress(t *testing.T) {
	t.Parallel()
	m := open(t, modelconfig.ProviderOpenAICompat, "http://169.254.169.254/v1", "sk-x", "m-1", "")
	_, err := drain(t, m, llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text("hi")}}}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "outbound address refused: 169.254.169.254 is a link-local address")
}
