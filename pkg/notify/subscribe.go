package notify

import (
	"log/slog"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// SubscribeUpdates subscribes to chat:update:<chatID> and calls fn with each
// decoded notification, one at a time, on the subscription's goroutine. A
// message that does not decode is logged (slog.Default()) and skipped. fn
// sees duplicates and reordered notifications; filter with a Watermark.
//
// The subscription is registered with the server asynchronously: call
// nc.Flush before reading the chat's state from the database if no
// notification after that read may be missed. Unsubscribe when done.
func SubscribeUpdates(nc *nats.Conn, chatID uuid.UUID, fn func(*chatdv1.ChatUpdateNotification)) (*nats.Subscription, error) {
	return nc.Subscribe(UpdateSubject(chatID), func(m *nats.Msg) {
		n := &chatdv1.ChatUpdateNotification{}
		if err := proto.Unmarshal(m.Data, n); err != nil {
			slog.Warn("skip undecodable chat update notification",
				slog.String("chat_id", chatID.String()),
				slog.String("subject", m.Subject),
				slog.String("error", err.Error()))
			return
		}
		fn(n)
	})
}

// SubscribeOwnership subscribes to chat:ownership and calls fn with each
// decoded notification, one at a time, on the subscription's goroutine,
// including the slot-freed one without a chat_id (IsSlotFreed). A message
// that does not decode, or whose chat_id is neither a UUID nor empty, is
// logged (slog.Default()) and skipped. The same caveats as SubscribeUpdates apply.
func SubscribeOwnership(nc *nats.Conn, fn func(*chatdv1.OwnershipNotification)) (*nats.Subscription, error) {
	return nc.Subscribe(OwnershipSubject, func(m *nats.Msg) {
		n := &chatdv1.OwnershipNotification{}
		err := proto.Unmarshal(m.Data, n)
		if err == nil && !IsSlotFreed(n) {
			_, err = uuid.Parse(n.ChatId)
		}
		if err != nil {
			slog.Warn("skip undecodable chat ownership notification",
				slog.String("chat_id", n.GetChatId()),
				slog.String("subject", m.Subject),
				slog.String("error", err.Error()))
			return
		}
		fn(n)
	})
}
