package browsertest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// TestClientLive runs the TypeScript client's live Vitest tests
// (web/vitest.live.config.ts) against the four services behind one origin:
// a recorded conversation with every event type, and the stream client
// resuming through a cut after each event type. It needs Node and
// web/node_modules (`make web-deps`); it fails, never skips, without them.
func TestClientLive(t *testing.T) {
	web, err := filepath.Abs("../../web")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(web, "node_modules", ".bin", "vitest")); err != nil {
		t.Fatalf("web/node_modules is missing: run `make web-deps` (npm ci in web/): %v", err)
	}
	st := stacktest.Start(t, 1)
	srv, px := newProxy(t, st)
	cmd := exec.CommandContext(t.Context(), filepath.Join(web, "node_modules", ".bin", "vitest"), "run", "-c", "vitest.live.config.ts")
	cmd.Dir = web
	cmd.Env = append(os.Environ(), "CHATD_LIVE_URL="+srv.URL, "CHATD_LIVE_TOKEN="+st.Token, "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("vitest (live): %v\n%s\nworker:\n%s\nstream:\n%s", err, out, st.Worker.Stderr(), st.StreamProcs[0].Stderr())
	}
	t.Logf("vitest (live):\n%s", out)
	if n := len(px.streamCursors()); n < 10 {
		t.Fatalf("the live tests opened %d streams through the proxy, want the recorder's and every resume", n)
	}
}
