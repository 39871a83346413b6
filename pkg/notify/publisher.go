package notify

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/chatstate"

	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// Publisher publishes notifications for committed transition bundles. Its
// AfterCommit method is meant for chatstate.Config.AfterCommit.
type Publisher struct {
	nc  *nats.Conn
	log *slog.Logger
}

// NewPublisher returns a Publisher over nc that logs failures to log
// (slog.Default() when nil).
func NewPublisher(nc *nats.Conn, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.Default()
	}
	return &Publisher{nc: nc, log: log}
}

// AfterCommit publishes, for every snapshot, chat:update:<chat_id>, and then
// chat:ownership when NeedsOwner says the chat wants a worker.
//
// Publishing is best-effort: a failure is logged with the chat ID and never
// returned, and the next transition, the acquisition tick or a stream poll
// recovers. It does not wait for the server: nats.Conn.Publish appends to the
// connection's buffer (or, while reconnecting, to its reconnect buffer, failing
// once that is full). Only when the buffer passes its size limit does Publish
// write to the socket itself, bounded by the connection's FlusherTimeout.
func (p *Publisher) AfterCommit(ctx context.Context, snaps []chatstate.Snapshot) {
	timeline.Mark("publish")
	for _, s := range snaps {
		p.publish(ctx, s, UpdateSubject(s.Chat.ID), UpdateFromSnapshot(s))
		if NeedsOwner(s) {
			p.publish(ctx, s, OwnershipSubject, OwnershipFromSnapshot(s))
		}
	}
}

func (p *Publisher) publish(ctx context.Context, s chatstate.Snapshot, subject string, msg proto.Message) {
	data, err := proto.Marshal(msg)
	if err == nil {
		err = p.nc.Publish(subject, data)
	}
	if err != nil {
		p.log.LogAttrs(ctx, slog.LevelWarn, "publish chat notification",
			slog.String("chat_id", s.Chat.ID.String()),
			slog.String("subject", subject),
			slog.Int64("snapshot_version", s.Chat.SnapshotVersion),
			slog.String("error", err.Error()))
	}
}
