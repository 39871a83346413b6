package streamloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/queries"
)

// dbState is everything one Sync reads, in one transaction.
type dbState struct {
	chat      queries.Chat
	changed   []msgRow // revision > local history_version, all rows, id order
	refresh   []msgRow // non-nil: full refresh (visible rows)
	queue     []queries.ChatQueuedMessage
	toolCalls []ToolCall
	// memo, on a shared read, shares its application among the loops
	// that apply it from the same state.
	memo *applyMemo
}

type msgRow struct {
	ID              int64
	Role            string
	Content         json.RawMessage
	Visibility      string
	Deleted         bool
	QueuedMessageID *int64
	Revision        int64
	Usage           json.RawMessage
	CreatedAt       pgTime
	// enc, set by messageRows, is the row's encoding, shared by every
	// loop that applies the read (a shared read's rows serve thousands of
	// watchers of one chat, each of which would parse the same content).
	enc *encodedMessage
}

// encodedMessage is a row's client encoding, made once.
type encodedMessage struct {
	once sync.Once
	msg  Message
	err  error
}

// message is the row's client encoding in chat chatID (the rows of a read
// are all of one chat). The Message is shared: it is never modified.
func (m msgRow) message(chatID uuid.UUID) (Message, error) {
	if m.enc == nil {
		return encodeMessage(chatID, m)
	}
	m.enc.once.Do(func() { m.enc.msg, m.enc.err = encodeMessage(chatID, m) })
	return m.enc.msg, m.enc.err
}

// readState does every database read of one Sync in one REPEATABLE READ,
// READ ONLY transaction, so all of them see one snapshot.
func readState(ctx context.Context, pool *pgxpool.Pool, in readInput, chatOnly bool) (dbState, error) {
	out, _, err := readShared(ctx, pool, in, in.queue, in.actionHistory, chatOnly)
	return out, err
}

// covered says which of the optional reads a dbState holds.
type covered struct{ queue, toolCalls bool }

// readShared is readState for every loop at in's history position and
// resume flag, with the queue read when the chat's queue is past minQueue
// and the open tool calls when its history is past minAction (the lowest
// positions among the loops sharing it). With chatOnly it first reads the
// chat row alone and returns it when nothing else needs reading.
func readShared(ctx context.Context, pool *pgxpool.Pool, in readInput, minQueue, minAction int64, chatOnly bool) (dbState, covered, error) {
	var out dbState
	var cov covered
	chatID := in.chatID
	if chatOnly {
		c, err := queries.New(pool).ChatGet(ctx, chatID)
		if errors.Is(err, pgx.ErrNoRows) {
			return out, cov, ErrChatNotFound
		}
		if err != nil {
			return out, cov, fmt.Errorf("read chat %s: %w", chatID, err)
		}
		if c.HistoryVersion <= in.history && c.QueueVersion <= minQueue &&
			(c.Status != queries.ChatStatusRequiresAction || c.HistoryVersion <= minAction) {
			out.chat = c
			return out, cov, nil
		}
	}
	return readPipelined(ctx, pool, in, minQueue, minAction)
}

// streamReadTx is a stream read's transaction: one snapshot of the chat
// and what changed, writing nothing.
var streamReadTx = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// readPipelined is readShared's read after the chat row, in one round
// trip: the BEGIN, the chat, the messages written after in.history, and
// — each sent whatever the chat says, and answered only when the chat's
// snapshot calls for it — the visible history when a message was deleted
// (a full refresh), the queue when its version moved past minQueue, the
// open tool calls when the chat waits in requires_action on a history past
// minAction; then the COMMIT. One batch, where a transaction of one
// statement at a time takes four round trips or more.
func readPipelined(ctx context.Context, pool *pgxpool.Pool, in readInput, minQueue, minAction int64) (dbState, covered, error) {
	var out dbState
	var cov covered
	chatID := in.chatID
	var changed, visible []queries.ChatMessage
	var open []queries.ChatMessageOpenToolCallsIfActionRow
	var chatErr, changedErr, visibleErr, queueErr, openErr error
	readVisible := func(q *queries.Queries) {
		visible, visibleErr = q.ChatMessageListVisibleIfDeletedSince(ctx, queries.ChatMessageListVisibleIfDeletedSinceParams{ChatID: chatID, Since: in.history})
	}
	if in.resumeInsideFull { // finish (or redo) the full refresh a resume is inside
		readVisible = func(q *queries.Queries) { visible, visibleErr = q.ChatMessageListVisible(ctx, chatID) }
	}
	err := queries.CommitPipeline(ctx, dbpool.BeginPipelinedTx(pool, streamReadTx),
		func(q *queries.Queries) { out.chat, chatErr = q.ChatGet(ctx, chatID) },
		func(q *queries.Queries) {
			changed, changedErr = q.ChatMessageListChangedSince(ctx, queries.ChatMessageListChangedSinceParams{ChatID: chatID, Since: in.history})
		},
		readVisible,
		func(q *queries.Queries) {
			out.queue, queueErr = q.ChatQueuedMessageListIfChanged(ctx, queries.ChatQueuedMessageListIfChangedParams{ChatID: chatID, SeenVersion: minQueue})
		},
		func(q *queries.Queries) {
			open, openErr = q.ChatMessageOpenToolCallsIfAction(ctx, queries.ChatMessageOpenToolCallsIfActionParams{ChatID: chatID, SeenHistory: minAction})
		},
	)
	switch {
	case errors.Is(chatErr, pgx.ErrNoRows):
		return out, cov, ErrChatNotFound
	case chatErr != nil:
		return out, cov, fmt.Errorf("read chat %s: %w", chatID, chatErr)
	case changedErr != nil:
		return out, cov, fmt.Errorf("read changed messages of chat %s: %w", chatID, changedErr)
	case visibleErr != nil:
		return out, cov, fmt.Errorf("read history of chat %s: %w", chatID, visibleErr)
	case queueErr != nil:
		return out, cov, fmt.Errorf("read queue of chat %s: %w", chatID, queueErr)
	case openErr != nil:
		return out, cov, fmt.Errorf("read open tool calls of chat %s: %w", chatID, openErr)
	case err != nil:
		return out, cov, fmt.Errorf("read chat %s: %w", chatID, err)
	}
	c := out.chat
	if c.HistoryVersion > in.history {
		out.changed = messageRows(changed)
		needRefresh := in.resumeInsideFull
		for _, m := range changed {
			needRefresh = needRefresh || m.Deleted
		}
		if needRefresh {
			out.refresh = messageRows(visible)
		}
	}
	cov.queue = c.QueueVersion > minQueue
	if c.Status == queries.ChatStatusRequiresAction && c.HistoryVersion > minAction {
		cov.toolCalls = true
		if out.toolCalls, err = dynamicCalls(c, open); err != nil {
			return out, cov, err
		}
	}
	return out, cov, nil
}

// covers reports whether a read holding cov serves a loop at in: it holds
// every optional part that loop's own read would have.
func (cov covered) covers(db dbState, in readInput) bool {
	c := db.chat
	needQueue := c.QueueVersion > in.queue
	needCalls := c.Status == queries.ChatStatusRequiresAction && c.HistoryVersion > in.actionHistory
	return (!needQueue || cov.queue) && (!needCalls || cov.toolCalls)
}

// messageRows converts rows read for the loops, never nil.
func messageRows(rows []queries.ChatMessage) []msgRow {
	out := make([]msgRow, len(rows))
	for i, m := range rows {
		out[i] = msgRow{
			ID: m.ID, Role: string(m.Role), Content: m.Content, Visibility: string(m.Visibility),
			Deleted: m.Deleted, QueuedMessageID: m.QueuedMessageID, Revision: m.Revision, Usage: m.Usage,
			CreatedAt: pgTime{m.CreatedAt}, enc: new(encodedMessage),
		}
	}
	return out
}

// dynamicCalls are the open calls of the chat's dynamic tools, with their
// arguments, never nil.
func dynamicCalls(c queries.Chat, open []queries.ChatMessageOpenToolCallsIfActionRow) ([]ToolCall, error) {
	names, err := chatstate.DynamicToolNames(c.DynamicTools)
	if err != nil {
		return nil, err
	}
	out := []ToolCall{}
	for _, o := range open {
		if names[o.ToolName] {
			key := chatstate.StoredCallKey(c.ID, o.MessageID, o.IdempotencyKey, o.ToolCallID)
			out = append(out, ToolCall{ToolCallID: o.ToolCallID, ToolName: o.ToolName, Args: nonNullJSON(o.Args), IdempotencyKey: key})
		}
	}
	return out, nil
}

func nonNullJSON(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage(`{}`)
	}
	return r
}
