// Package notify publishes and receives chatd's post-commit notifications on
// core NATS (spec: "Pubsub"). Two subjects exist: the global chat:ownership,
// telling workers a runnable chat has no owner, and the per-chat
// chat:update:<chat_id>, telling a chat's owner and stream loops that its
// execution state changed. Payloads are the protobuf messages
// chatdv1.OwnershipNotification and chatdv1.ChatUpdateNotification.
//
// Notifications are hints: best-effort, possibly dropped, duplicated or
// reordered. Receivers drop stale ones with a Watermark and fall back on
// database polling.
package notify

import (
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/chatstate"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// OwnershipSubject is the global subject on which runnable, unowned chats are
// announced to chat workers.
const OwnershipSubject = "chat:ownership"

// updateSubjectPrefix prefixes a chat ID to form its update subject.
const updateSubjectPrefix = "chat:update:"

// UpdateSubject is the per-chat subject chat:update:<chat_id>. NATS splits
// subjects into tokens at '.', not ':', so the whole subject is one token and
// cannot be matched by a wildcard such as chat:update:*.
func UpdateSubject(id uuid.UUID) string { return updateSubjectPrefix + id.String() }

// UpdateFromSnapshot builds the chat:update payload: the snapshot's committed
// values of the spec's nine fields. status is the chats.status word
// ("waiting", "running", ...); worker_id and runner_id are unset when the
// columns are NULL.
func UpdateFromSnapshot(s chatstate.Snapshot) *chatdv1.ChatUpdateNotification {
	c := s.Chat
	n := &chatdv1.ChatUpdateNotification{
		SnapshotVersion:   c.SnapshotVersion,
		HistoryVersion:    c.HistoryVersion,
		QueueVersion:      c.QueueVersion,
		RetryStateVersion: c.RetryStateVersion,
		GenerationAttempt: c.GenerationAttempt,
		Status:            string(c.Status),
		Archived:          c.Archived,
	}
	if c.WorkerID != nil {
		n.WorkerId = proto.String(c.WorkerID.String())
	}
	if c.RunnerID != nil {
		n.RunnerId = proto.String(c.RunnerID.String())
	}
	return n
}

// OwnershipFromSnapshot builds the chat:ownership payload for the snapshot's
// chat.
func OwnershipFromSnapshot(s chatstate.Snapshot) *chatdv1.OwnershipNotification {
	return &chatdv1.OwnershipNotification{
		ChatId:          s.Chat.ID.String(),
		SnapshotVersion: s.Chat.SnapshotVersion,
	}
}

// SlotFreed builds the chat:ownership payload that names no chat: a
// worker released chats and so freed concurrent agent limiter slots, and
// every worker runs a full acquisition pass (a chat refused for capacity is
// not named anywhere else).
func SlotFreed() *chatdv1.OwnershipNotification { return &chatdv1.OwnershipNotification{} }

// IsSlotFreed reports whether n is SlotFreed's notification.
func IsSlotFreed(n *chatdv1.OwnershipNotification) bool { return n.GetChatId() == "" }

// NeedsOwner reports whether the snapshot calls for a chat:ownership
// notification (spec "Notification emission rules"): the chat is in a
// runnable state (R0 R1 I0 I1 A0 A1) and no worker owns it, that is
// worker_id or runner_id is NULL or the owner has no fresh heartbeat
// (OwnerStale, which a committed bundle reads inside its transaction).
func NeedsOwner(s chatstate.Snapshot) bool {
	return s.State().Runnable() && (s.Chat.WorkerID == nil || s.Chat.RunnerID == nil || s.OwnerStale)
}
