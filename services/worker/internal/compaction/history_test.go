package compaction_test

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/compaction"
)

// rows turns messages into stored rows with IDs in order.
func rows(ms ...chatstate.NewMessage) []queries.ChatMessage {
	out := make([]queries.ChatMessage, len(ms))
	for i, m := range ms {
		vis := m.Visibility
		if vis == "" {
			vis = chatstate.VisibleToBoth
		}
		out[i] = queries.ChatMessage{ID: int64(i + 1), Role: m.Role, Content: m.Content.Marshal(), Visibility: vis, Compressed: m.Compressed, Usage: m.Usage}
	}
	return out
}

func user(text string) chatstate.NewMessage {
	return chatstate.UserMessage(chatmsg.Content{chatmsg.Text(text)})
}

func assistant(text string, promptTokens int) chatstate.NewMessage {
	usage, _ := json.Marshal(map[string]int{"prompt_tokens": promptTokens, "output_tokens": 1})
	return chatstate.NewMessage{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text(text)}, Usage: usage}
}

func summary(text string, threshold int32) []chatstate.NewMessage {
	return compaction.Triplet("c1", compaction.Summary{Text: text, Source: compaction.SourceAutomatic, ThresholdPercent: threshold, TriggerLimitTokens: 10000, ContextLimitTokens: 10000})
}

func TestTripletShape(t *testing.T) {
	t.Parallel()
	tr := compaction.Triplet("call-1", compaction.Summary{Text: "S", Source: compaction.SourceManual, ThresholdPercent: 70, TriggerLimitTokens: 8000, ContextLimitTokens: 10000})
	require.Len(t, tr, 3)
	require.Equal(t, chatstate.RoleUser, tr[0].Role)
	require.Equal(t, chatstate.VisibleToModel, tr[0].Visibility)
	require.True(t, tr[0].Compressed)
	require.True(t, strings.HasSuffix(tr[0].Content.PlainText(), "S"))
	require.Equal(t, chatstate.VisibleToUser, tr[1].Visibility)
	require.Equal(t, compaction.ToolSummarized, tr[1].Content[0].ToolName)
	require.JSONEq(t, `{"source":"manual"}`, string(tr[1].Content[0].Args))
	require.Equal(t, chatstate.VisibleToUser, tr[2].Visibility)
	require.JSONEq(t, `{"summary":"S","source":"manual","threshold_percent":70,"trigger_context_limit_tokens":8000,"context_limit_tokens":10000}`,
		string(tr[2].Content[0].Result))
	for _, m := range tr {
		require.True(t, m.Compressed)
	}
}

func TestLatestBoundaryTellsSummaryFromClear(t *testing.T) {
	t.Parallel()
	msgs := rows(append(append([]chatstate.NewMessage{user("a"), assistant("b", 10)}, summary("S", 70)...), user("c"))...)
	i, kind := compaction.LatestBoundary(msgs)
	require.Equal(t, 2, i)
	require.Equal(t, compaction.BoundarySummarized, kind)

	msgs = rows(append(append(append([]chatstate.NewMessage{user("a"), assistant("b", 10)}, summary("S", 70)...), user("c"), assistant("d", 20)),
		chatstate.ClearBoundary("x")...)...)
	i, kind = compaction.LatestBoundary(msgs)
	require.Equal(t, 7, i)
	require.Equal(t, compaction.BoundaryCleared, kind)
	h := compaction.Analyze(msgs)
	require.False(t, h.Compactable, "nothing after the clear")
	require.False(t, h.HasLatestUsage, "usage before the clear does not count")
	require.Nil(t, h.Summary, "the clear is newer than the summary")
}

func TestAnalyzeReadsUsageAfterTheBoundary(t *testing.T) {
	t.Parallel()
	msgs := rows(append(append([]chatstate.NewMessage{user("a"), assistant("b", 9000)}, summary("S", 70)...),
		user("c"), assistant("d", 7500), user("e"), assistant("f", 7600))...)
	h := compaction.Analyze(msgs)
	require.True(t, h.Compactable)
	require.Equal(t, int64(7500), h.FirstPromptTokens)
	require.Equal(t, int64(7600), h.LatestPromptTokens)
	require.NotNil(t, h.Summary)
	require.Equal(t, int32(70), h.Summary.ThresholdPercent)
	require.Equal(t, int64(10000), h.Summary.TriggerLimitTokens)
}

func TestSplitKeepsTrailingUserMessagesOut(t *testing.T) {
	t.Parallel()
	msgs := rows(user("old"), assistant("old answer", 10), user("first"), user("::usage 1 1\nsecond"))
	input, trailing := compaction.Split(msgs)
	require.Len(t, input, 2)
	require.Len(t, trailing, 2)
	replay, err := compaction.Replay(trailing)
	require.NoError(t, err)
	require.Len(t, replay, 2)
	for i, m := range replay {
		require.Equal(t, chatstate.RoleUser, m.Role)
		require.Equal(t, chatstate.VisibleToModel, m.Visibility)
		require.False(t, m.Compressed, "replayed rows are no boundary")
		require.JSONEq(t, string(trailing[i].Content), string(m.Content.Marshal()), "verbatim")
	}
	text, err := compaction.Transcript(input, "keep file names")
	require.NoError(t, err)
	require.Contains(t, text, "> old answer")
	require.Contains(t, text, "> keep file names")
	require.NotContains(t, text, "second", "trailing messages are not summarized")
}

func TestTranscriptQuotesDirectives(t *testing.T) {
	t.Parallel()
	text, err := compaction.Transcript(rows(user("::reply x\nhello"), assistant("x", 1)), "")
	require.NoError(t, err)
	for _, line := range strings.Split(text, "\n") {
		require.False(t, strings.HasPrefix(strings.TrimSpace(line), "::"), "line %q reads as a directive", line)
	}
}

// usageReference is Analyze's usage reading as first written: every usage
// after the boundary decoded in order. Analyze decodes from both ends
// instead and must agree with it on any history.
func usageReference(msgs []queries.ChatMessage) compaction.History {
	var h compaction.History
	b, _ := compaction.LatestBoundary(msgs)
	for _, m := range msgs[b+1:] {
		if m.Role != chatstate.RoleAssistant || m.Compressed {
			continue
		}
		h.Compactable = true
		var u struct {
			PromptTokens *int64 `json:"prompt_tokens"`
		}
		if len(m.Usage) > 0 && json.Unmarshal(m.Usage, &u) == nil && u.PromptTokens != nil {
			if !h.HasFirstUsage {
				h.FirstPromptTokens, h.HasFirstUsage = *u.PromptTokens, true
			}
			h.LatestPromptTokens, h.HasLatestUsage = *u.PromptTokens, true
		}
	}
	return h
}

func TestAnalyzeUsageAgreesWithReadingEveryUsage(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	usages := []json.RawMessage{nil, json.RawMessage(`{"output_tokens":3}`), json.RawMessage(`not json`), nil}
	for n := range 2000 {
		var ms []chatstate.NewMessage
		for range rng.IntN(12) {
			switch rng.IntN(6) {
			case 0:
				ms = append(ms, user("u"))
			case 1:
				ms = append(ms, summary("s", 70)...)
			default:
				a := assistant("a", rng.IntN(10000))
				if k := rng.IntN(8); k < len(usages) {
					a.Usage = usages[k]
				}
				a.Compressed = rng.IntN(5) == 0
				ms = append(ms, a)
			}
		}
		msgs := rows(ms...)
		got, want := compaction.Analyze(msgs), usageReference(msgs)
		require.Equal(t, want.Compactable, got.Compactable, "history %d", n)
		require.Equal(t, [2]bool{want.HasFirstUsage, want.HasLatestUsage}, [2]bool{got.HasFirstUsage, got.HasLatestUsage}, "history %d", n)
		require.Equal(t, [2]int64{want.FirstPromptTokens, want.LatestPromptTokens}, [2]int64{got.FirstPromptTokens, got.LatestPromptTokens}, "history %d", n)
	}
}
