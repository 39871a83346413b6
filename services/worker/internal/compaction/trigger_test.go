package compaction_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/worker/internal/compaction"
)

func TestResolveTriggers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		in        compaction.Inputs
		chat, org int64 // points; -1 = disabled
		binding   compaction.TriggerKind
	}{
		{"chat trigger only", compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 70}, 7000, -1, compaction.TriggerChat},
		{"100 disables the chat trigger", compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 100}, -1, -1, ""},
		{"unknown window disables the chat trigger", compaction.Inputs{ChatThreshold: 70}, -1, -1, ""},
		{"0 always compacts", compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 0}, 0, -1, compaction.TriggerChat},
		{"lower override point binds", compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 70, OverrideContextLimit: 8000}, 7000, 6400, compaction.TriggerOrganization},
		{"lower chat point binds", compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 50, OverrideContextLimit: 8000}, 5000, 6400, compaction.TriggerChat},
		{"a tie goes to the chat trigger", compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 80, OverrideContextLimit: 10000}, 8000, 8000, compaction.TriggerChat},
		{"an override point beyond the chat window never fires", compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 100, OverrideContextLimit: 20000}, -1, -1, ""},
		{"the override trigger alone when the chat trigger is off", compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 100, OverrideContextLimit: 5000}, -1, 4000, compaction.TriggerOrganization},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := compaction.Resolve(tc.in)
			point := func(tr *compaction.Trigger) int64 {
				if tr == nil {
					return -1
				}
				return tr.Point
			}
			require.Equal(t, tc.chat, point(got.Chat), "chat point")
			require.Equal(t, tc.org, point(got.Organization), "organization point")
			if tc.binding == "" {
				require.Nil(t, got.Binding)
				return
			}
			require.NotNil(t, got.Binding)
			require.Equal(t, tc.binding, got.Binding.Kind)
		})
	}
}

func TestRecordedIsTheBindingTrigger(t *testing.T) {
	t.Parallel()
	th, limit := compaction.Resolve(compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 70, OverrideContextLimit: 8000}).Recorded()
	require.Equal(t, int32(80), th)
	require.Equal(t, int64(8000), limit)
	th, limit = compaction.Resolve(compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 100}).Recorded()
	require.Equal(t, int32(100), th, "no trigger binds: the chat threshold is recorded")
	require.Equal(t, int64(10000), limit)
}

func TestDecide(t *testing.T) {
	t.Parallel()
	chat := compaction.Resolve(compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 70})
	same := &compaction.SummaryResult{ThresholdPercent: 70, TriggerLimitTokens: 10000}
	for _, tc := range []struct {
		name string
		t    compaction.Triggers
		h    compaction.History
		want compaction.Outcome
	}{
		{"no usage yet", chat, compaction.History{}, compaction.Continue},
		{"below the trigger", chat, compaction.History{HasLatestUsage: true, LatestPromptTokens: 6999}, compaction.Continue},
		{"reaching the trigger compacts", chat, compaction.History{HasLatestUsage: true, LatestPromptTokens: 7000}, compaction.Compact},
		{"trigger disabled", compaction.Resolve(compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 100}),
			compaction.History{HasLatestUsage: true, LatestPromptTokens: 9999}, compaction.Continue},
		{"the first response after the summary is still over", chat, compaction.History{
			Summary: same, HasFirstUsage: true, FirstPromptTokens: 7500, HasLatestUsage: true, LatestPromptTokens: 7500,
		}, compaction.StillOverLimit},
		{"the summary helped; the history grew again", chat, compaction.History{
			Summary: same, HasFirstUsage: true, FirstPromptTokens: 2000, HasLatestUsage: true, LatestPromptTokens: 7100,
		}, compaction.Compact},
		{"a summary under another trigger is no failed compaction", chat, compaction.History{
			Summary: &compaction.SummaryResult{ThresholdPercent: 90, TriggerLimitTokens: 10000}, HasFirstUsage: true,
			FirstPromptTokens: 8000, HasLatestUsage: true, LatestPromptTokens: 8000,
		}, compaction.Compact},
		{"0% never ends in still over limit", compaction.Resolve(compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 0}), compaction.History{
			Summary: &compaction.SummaryResult{ThresholdPercent: 0, TriggerLimitTokens: 10000}, HasFirstUsage: true,
			FirstPromptTokens: 10, HasLatestUsage: true, LatestPromptTokens: 10,
		}, compaction.Compact},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, compaction.Decide(tc.t, tc.h))
		})
	}
}

func TestStillOverLimitMessageNamesTheRemedy(t *testing.T) {
	t.Parallel()
	chat := compaction.Resolve(compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 70, PersonalThreshold: true})
	msg := compaction.StillOverLimitMessage(chat, 7500)
	require.Contains(t, msg, "7500 prompt tokens")
	require.Contains(t, msg, "7000 tokens (70% of the chat model's 10000-token window)")
	require.Contains(t, msg, "raise your compaction threshold")
	require.NotContains(t, msg, "override model")

	org := compaction.Resolve(compaction.Inputs{ChatContextLimit: 10000, ChatThreshold: 90, OverrideContextLimit: 5000})
	msg = compaction.StillOverLimitMessage(org, 4500)
	require.Contains(t, msg, "80% of the 5000-token window of the organization's compaction model")
	require.Contains(t, msg, "compaction override model with a larger context window")
	require.NotContains(t, msg, "threshold for this model", "usage below the chat trigger: only the override is named")

	msg = compaction.StillOverLimitMessage(org, 9500)
	require.Contains(t, msg, "compaction override model with a larger context window")
	require.Contains(t, msg, "personal compaction threshold", "usage also reaches the chat trigger: both are named")
}
