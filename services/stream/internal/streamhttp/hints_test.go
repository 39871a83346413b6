package streamhttp_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/stream/internal/streamhttp"
)

// TestHintsFromNotification: every version field of a chat:update becomes
// a hint, and the worker is tri-state — a readable ID names the owner, an
// unset one is a null worker (the chat has no owner), and an unreadable one
// says nothing about the worker.
func TestHintsFromNotification(t *testing.T) {
	owner := uuid.New()
	ownerText, garbage := owner.String(), "not-a-uuid"
	for _, tc := range []struct {
		name       string
		workerID   *string
		wantKnown  bool
		wantWorker *uuid.UUID
	}{
		{"owned", &ownerText, true, &owner},
		{"unowned (unset is a null worker)", nil, true, nil},
		{"unreadable worker id is ignored", &garbage, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := streamhttp.HintsFromNotification(&chatdv1.ChatUpdateNotification{
				SnapshotVersion: 7, HistoryVersion: 5, QueueVersion: 3,
				RetryStateVersion: 2, GenerationAttempt: 4, Status: "running", WorkerId: tc.workerID,
			})
			require.Equal(t, int64(7), *h.SnapshotVersion)
			require.Equal(t, int64(5), *h.HistoryVersion)
			require.Equal(t, int64(3), *h.QueueVersion)
			require.Equal(t, int64(2), *h.RetryStateVersion)
			require.Equal(t, int64(4), *h.GenerationAttempt)
			require.Equal(t, "running", *h.Status)
			require.Equal(t, tc.wantKnown, h.Worker, "whether the hint speaks for the worker")
			require.Equal(t, tc.wantWorker, h.WorkerID)
		})
	}
}
