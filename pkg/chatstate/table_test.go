package chatstate_test

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

// TestEdgesMatchSpecTSV keeps the Go table equal to the spec's transcribed
// diagrams (testdata/transitions.tsv is a verbatim copy of
// docs/spec/transitions.tsv), row for row, in order.
func TestEdgesMatchSpecTSV(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/transitions.tsv")
	require.NoError(t, err)
	defer f.Close()

	var fromTSV []string
	sc := bufio.NewScanner(f)
	header := true
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if header { // diagram from transition variant to
			header = false
			continue
		}
		fromTSV = append(fromTSV, line)
	}
	require.NoError(t, sc.Err())

	var fromGo []string
	prose := 0
	for _, e := range chatstate.Edges {
		if e.Prose {
			prose++
			continue
		}
		fromGo = append(fromGo, strings.Join([]string{e.Diagram, e.From, string(e.Transition), e.Variant, e.To}, "\t"))
	}
	require.Len(t, fromTSV, 78, "the spec's diagrams have 78 edges")
	require.Equal(t, fromTSV, fromGo)
	require.Equal(t, 1, prose, "only Create's landing in W comes from the prose")
}

func TestClassify(t *testing.T) {
	t.Parallel()
	type row struct {
		status   chatstate.Status
		archived bool
		queue    int64
		want     chatstate.State
	}
	rows := []row{
		{chatstate.StatusWaiting, false, 0, chatstate.W},
		{chatstate.StatusError, false, 0, chatstate.E0},
		{chatstate.StatusError, false, 2, chatstate.E1},
		{chatstate.StatusRunning, false, 0, chatstate.R0},
		{chatstate.StatusRunning, false, 1, chatstate.R1},
		{chatstate.StatusInterrupting, false, 0, chatstate.I0},
		{chatstate.StatusInterrupting, false, 3, chatstate.I1},
		{chatstate.StatusRequiresAction, false, 0, chatstate.A0},
		{chatstate.StatusRequiresAction, false, 1, chatstate.A1},
		{chatstate.StatusWaiting, true, 0, chatstate.XW},
		{chatstate.StatusError, true, 0, chatstate.XE0},
		{chatstate.StatusError, true, 1, chatstate.XE1},
		// Combinations the spec's table has no state for.
		{chatstate.StatusWaiting, false, 1, chatstate.Invalid},
		{chatstate.StatusWaiting, true, 1, chatstate.Invalid},
		{chatstate.StatusRunning, true, 0, chatstate.Invalid},
		{chatstate.StatusInterrupting, true, 1, chatstate.Invalid},
		{chatstate.StatusRequiresAction, true, 0, chatstate.Invalid},
	}
	for _, r := range rows {
		require.Equal(t, r.want, chatstate.Classify(true, r.status, r.archived, r.queue), "%+v", r)
	}
	require.Equal(t, chatstate.N, chatstate.Classify(false, "", false, 0))
}

func TestAllowedMatchesEndpointLists(t *testing.T) {
	t.Parallel()
	// The spec's "HTTP endpoints" lists, which must agree with the diagrams.
	lists := map[chatstate.Transition][]chatstate.State{
		chatstate.SendMessageQueue:       {chatstate.W, chatstate.E0, chatstate.E1, chatstate.R0, chatstate.R1, chatstate.I0, chatstate.I1, chatstate.A0, chatstate.A1},
		chatstate.SendMessageInterrupt:   {chatstate.W, chatstate.E0, chatstate.E1, chatstate.R0, chatstate.R1, chatstate.I0, chatstate.I1, chatstate.A0, chatstate.A1},
		chatstate.EditMessage:            {chatstate.W, chatstate.E0, chatstate.E1, chatstate.R0, chatstate.R1, chatstate.I0, chatstate.I1, chatstate.A0, chatstate.A1},
		chatstate.DeleteQueuedMessage:    {chatstate.E1, chatstate.R1, chatstate.I1, chatstate.A1},
		chatstate.PromoteQueuedMessage:   {chatstate.E1, chatstate.R1, chatstate.I1, chatstate.A1},
		chatstate.Interrupt:              {chatstate.R0, chatstate.R1, chatstate.A0, chatstate.A1},
		chatstate.CompleteRequiresAction: {chatstate.A0, chatstate.A1},
		chatstate.RequestCompaction:      {chatstate.W, chatstate.E0, chatstate.E1},
		chatstate.ClearContext:           {chatstate.W, chatstate.E0},
		chatstate.SetArchivedTrue:        {chatstate.W, chatstate.E0, chatstate.E1},
		chatstate.SetArchivedFalse:       {chatstate.XW, chatstate.XE0, chatstate.XE1},
		chatstate.FinishError:            {chatstate.W, chatstate.R0, chatstate.R1},
	}
	for tr, want := range lists {
		var got []chatstate.State
		for _, s := range chatstate.States {
			if chatstate.Allowed(s, tr) {
				got = append(got, s)
			}
		}
		require.Equal(t, want, got, "%s", tr)
	}
}
