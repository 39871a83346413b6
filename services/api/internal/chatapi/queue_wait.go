package chatapi

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/telemetry"
)

// recordQueueWaits records the queue_wait stage of each prompt a committed
// bundle of the api promoted from the queue (a message sent to an errored
// chat, PromoteQueuedMessage, an interrupt or interrupt-send on an unowned
// chat): a standalone, turn-scoped stage from the prompt's queued
// created_at to now (spec "Turn span lifecycle", Promotion), as the worker records for the
// promotions it commits.
func (s *Server) recordQueueWaits(ctx context.Context, chat queries.Chat, queuedAt []time.Time) {
	if len(queuedAt) == 0 {
		return
	}
	now := s.now()
	ctx = telemetry.WithStageIdentity(context.WithoutCancel(ctx), telemetry.ScopeTurn, telemetry.ChatKind(chat.ParentChatID != nil))
	for _, at := range queuedAt {
		s.titles.stages().Record(ctx, telemetry.StageQueueWait, at, now, telemetry.NewRoot(),
			telemetry.WithAttributes(attribute.String(telemetry.AttrChatID, chat.ID.String())))
	}
}
