package queries

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// BundleOpening is what a transition bundle's first round trip reads.
type BundleOpening struct {
	// ReadOpenToolCalls asks for OpenToolCalls too.
	ReadOpenToolCalls bool
	// ReadMessages asks for Messages: the active history
	// (ChatMessageListActive), or with MessagesSince set the rows changed
	// after that history version (ChatMessageListChangedSince).
	ReadMessages  bool
	MessagesSince *int64

	Chat          Chat // locked, its snapshot_version advanced
	Queue         ChatQueueLenAndNowRow
	OpenToolCalls []ChatMessageOpenToolCallsRow
	Messages      []ChatMessage
}

// OpenBundle opens a transition bundle in one round trip: it sends
// ChatLockAndBump, ChatQueueLenAndNow and what o asks for (open tool calls,
// messages) together as a pipeline (pgx's batch) on tx. They stay separate
// statements, run one after the other, so the reads take their snapshots
// once the lock is held (the reason ChatQueueLenAndNow is a statement of its
// own); only the waits between them on the network are gone. Every bundle
// on the way to a turn's first part opens with it. A chat that does not
// exist is pgx.ErrNoRows.
func OpenBundle(ctx context.Context, tx pgx.Tx, id uuid.UUID, o *BundleOpening) error {
	b := &pgx.Batch{}
	b.Queue(chatLockAndBump, id)
	b.Queue(chatQueueLenAndNow, id)
	if o.ReadOpenToolCalls {
		b.Queue(chatMessageOpenToolCalls, id)
	}
	switch {
	case o.ReadMessages && o.MessagesSince != nil:
		b.Queue(chatMessageListChangedSince, id, *o.MessagesSince)
	case o.ReadMessages:
		b.Queue(chatMessageListActive, id)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return err
	}
	// The row is RETURNING * of chats, whose columns Chat holds in order.
	if o.Chat, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Chat]); err != nil {
		return err
	}
	if err := br.QueryRow().Scan(&o.Queue.QueueLen, &o.Queue.Now); err != nil {
		return fmt.Errorf("count queue: %w", err)
	}
	if o.ReadOpenToolCalls {
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("find open tool calls: %w", err)
		}
		o.OpenToolCalls, err = pgx.CollectRows(rows, pgx.RowToStructByPos[ChatMessageOpenToolCallsRow])
		if err != nil {
			return fmt.Errorf("find open tool calls: %w", err)
		}
	}
	if o.ReadMessages {
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("list messages: %w", err)
		}
		if o.Messages, err = pgx.CollectRows(rows, pgx.RowToStructByPos[ChatMessage]); err != nil {
			return fmt.Errorf("list messages: %w", err)
		}
	}
	return br.Close()
}

// ChatLimiterLockAndCountOwned takes the capacity admission lock and counts
// the slots in use in one round trip: ChatLimiterLock and
// ChatLimiterCountOwned as a pipeline on q's transaction. The count is its
// own statement, run once the lock is granted, so under READ COMMITTED it
// sees every admission committed before the lock came to us. A Queries
// whose connection cannot pipeline runs the two one after the other. When
// the lock fails (lock_timeout) the count is not run.
func (q *Queries) ChatLimiterLockAndCountOwned(ctx context.Context, lock ChatLimiterLockParams, leaseSeconds float64) (ChatLimiterCountOwnedRow, error) {
	var row ChatLimiterCountOwnedRow
	batcher, ok := q.db.(interface {
		SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	})
	if !ok {
		if err := q.ChatLimiterLock(ctx, lock); err != nil {
			return row, fmt.Errorf("take the limiter lock: %w", err)
		}
		row, err := q.ChatLimiterCountOwned(ctx, leaseSeconds)
		if err != nil {
			return row, fmt.Errorf("count owned chats: %w", err)
		}
		return row, nil
	}
	b := &pgx.Batch{}
	b.Queue(chatLimiterLock, lock.LockKey, lock.LockTimeout)
	b.Queue(chatLimiterCountOwned, leaseSeconds)
	br := batcher.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return row, fmt.Errorf("take the limiter lock: %w", err)
	}
	if err := br.QueryRow().Scan(&row.RootChats, &row.SubagentChats); err != nil {
		return row, fmt.Errorf("count owned chats: %w", err)
	}
	return row, br.Close()
}

// ChatMessageInsertAndSetExecution inserts a message and rewrites the
// chat's execution state in one round trip: ChatMessageInsert and
// ChatSetExecution as a pipeline on q's transaction, for a transition that
// does both and needs nothing from the first to send the second (a user
// message starting a turn). The update runs after the insert, so the chat
// row it returns carries the history_version the message trigger set. A
// Queries whose connection cannot pipeline runs the two one after the
// other.
func (q *Queries) ChatMessageInsertAndSetExecution(ctx context.Context, ins ChatMessageInsertParams, exec ChatSetExecutionParams) (ChatMessage, Chat, error) {
	batcher, ok := q.db.(interface {
		SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	})
	if !ok {
		msg, err := q.ChatMessageInsert(ctx, ins)
		if err != nil {
			return msg, Chat{}, fmt.Errorf("insert message: %w", err)
		}
		chat, err := q.ChatSetExecution(ctx, exec)
		if err != nil {
			return msg, chat, fmt.Errorf("write execution state: %w", err)
		}
		return msg, chat, nil
	}
	b := &pgx.Batch{}
	b.Queue(chatMessageInsert, ins.ChatID, ins.Role, ins.Content, ins.Visibility, ins.Compressed, ins.QueuedMessageID,
		ins.ModelConfigID, ins.ReasoningEffort, ins.Usage, ins.CreatedBy, ins.CreatedAt, ins.TurnID)
	b.Queue(chatSetExecution, exec.Status, exec.LastError, exec.RequiresActionDeadlineAt, exec.CompactionRequestedAt,
		exec.ModelConfigID, exec.ReasoningEffort, exec.Now, exec.ID)
	br := batcher.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return ChatMessage{}, Chat{}, fmt.Errorf("insert message: %w", err)
	}
	// Both return every column of their table, in the structs' order.
	msg, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[ChatMessage])
	if err != nil {
		return ChatMessage{}, Chat{}, fmt.Errorf("insert message: %w", err)
	}
	if rows, err = br.Query(); err != nil {
		return msg, Chat{}, fmt.Errorf("write execution state: %w", err)
	}
	chat, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Chat])
	if err != nil {
		return msg, Chat{}, fmt.Errorf("write execution state: %w", err)
	}
	return msg, chat, br.Close()
}
