package openaisdktest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/inproctest"
	"github.com/chatd/chatd/pkg/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// nodeTimeout bounds the Node tests' run.
const nodeTimeout = 5 * time.Minute

// TestOpenAINodeSDK runs node/sdk.test.mjs (node --test) with the npm
// openai SDK against the api, a worker running the scripted model and the
// relay: create, background streams dropped and resumed, replays,
// cancel, previous_response_id, conversations and error classes.
func TestOpenAINodeSDK(t *testing.T) {
	dir, err := filepath.Abs("node")
	require.NoError(t, err)
	node, err := exec.LookPath("node")
	require.NoError(t, err, "the npm SDK's tests need Node.js 20 or later on PATH")
	_, err = os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json"))
	require.NoError(t, err, "the npm openai package is not installed: run `make openai-sdk-deps` (npm ci in %s)", dir)

	st := inproctest.Start(t, inproctest.Options{Relay: true, Env: map[string]string{
		"CHATD_MAX_GENERATION_RETRIES": "3", "CHATD_MAX_STEPS_PER_TURN": "50",
	}})
	user, org := uuid.New(), uuid.New()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"CHATD_OPENAI_BASE_URL="+st.Base+"/v1",
		"CHATD_OPENAI_TOKEN="+st.Token(user, org, false),
		"CHATD_OPENAI_OTHER_TOKEN="+st.Token(uuid.New(), uuid.New(), false),
		"NO_COLOR=1",
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test sdk.test.mjs:\n%s", out)
	require.NoError(t, ctx.Err(), "the Node tests did not finish within %s", nodeTimeout)
	require.NoError(t, err, "the npm openai SDK's tests failed (output above)")
}
