package queries

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ChatLockAndQueueLen opens a transition bundle in one round trip: it sends
// ChatLockAndBump and ChatQueueLenAndNow together as a pipeline (pgx's
// batch) on tx. They stay two statements, run one after the other, so the
// count still takes its snapshot once the lock is held (the reason
// ChatQueueLenAndNow is a statement of its own); only the wait between them
// on the network is gone. Every bundle on the way to a turn's first part
// opens with it. A chat that does not exist is pgx.ErrNoRows.
func ChatLockAndQueueLen(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Chat, ChatQueueLenAndNowRow, error) {
	b := &pgx.Batch{}
	b.Queue(chatLockAndBump, id)
	b.Queue(chatQueueLenAndNow, id)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return Chat{}, ChatQueueLenAndNowRow{}, err
	}
	// The row is RETURNING * of chats, whose columns Chat holds in order.
	chat, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Chat])
	if err != nil {
		return Chat{}, ChatQueueLenAndNowRow{}, err
	}
	var q ChatQueueLenAndNowRow
	if err := br.QueryRow().Scan(&q.QueueLen, &q.Now); err != nil {
		return Chat{}, ChatQueueLenAndNowRow{}, fmt.Errorf("count queue: %w", err)
	}
	return chat, q, br.Close()
}
