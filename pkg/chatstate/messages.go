package chatstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
)

// Message roles and visibilities, re-exported for callers building messages.
const (
	RoleSystem    = queries.ChatMessageRoleSystem
	RoleUser      = queries.ChatMessageRoleUser
	RoleAssistant = queries.ChatMessageRoleAssistant
	RoleTool      = queries.ChatMessageRoleTool

	VisibleToBoth  = queries.ChatMessageVisibilityBoth
	VisibleToModel = queries.ChatMessageVisibilityModel
	VisibleToUser  = queries.ChatMessageVisibilityUser
)

// NewMessage is a message a transition inserts into history.
type NewMessage struct {
	Role    queries.ChatMessageRole
	Content chatmsg.Content
	// Visibility defaults to both.
	Visibility queries.ChatMessageVisibility
	// Compressed marks the rows of a compaction or clear boundary.
	Compressed      bool
	ModelConfigID   *uuid.UUID
	ReasoningEffort *string
	Usage           json.RawMessage
	CreatedBy       *uuid.UUID
	// TurnID, on a prompt, is the turn ID its lifecycle hook events were
	// dispatched with (allocated before user_prompt_submit); the worker's
	// events of the turn it starts carry it too. A queued prompt keeps it.
	TurnID *uuid.UUID
}

// UserMessage is a plain user message with the given content.
func UserMessage(content chatmsg.Content) NewMessage {
	return NewMessage{Role: RoleUser, Content: content}
}

func (m NewMessage) validate() error {
	if !m.Role.Valid() {
		return fmt.Errorf("message role %q: %w", m.Role, ErrInvalidArgument)
	}
	if m.Visibility != "" && !m.Visibility.Valid() {
		return fmt.Errorf("message visibility %q: %w", m.Visibility, ErrInvalidArgument)
	}
	if err := m.Content.Validate(); err != nil {
		return fmt.Errorf("message content: %v: %w", err, ErrInvalidArgument)
	}
	return nil
}

// Reasons written into synthetic cancellation tool results.
const (
	ReasonNewUserMessage        = "the user sent a new message before the tool call finished"
	ReasonInterrupted           = "the user interrupted the chat"
	ReasonRequiresActionTimeout = "no tool result arrived before the requires_action deadline"
	ReasonInvalidState          = "the chat was reconciled from an invalid state"
	ReasonPromoted              = "the user promoted a queued message"
)

func (tx *Tx) insertMessage(ctx context.Context, m NewMessage, queuedID *int64) (queries.ChatMessage, error) {
	if err := m.validate(); err != nil {
		return queries.ChatMessage{}, err
	}
	return tx.insertRow(ctx, m, queuedID)
}

// insertRow inserts m as one row.
func (tx *Tx) insertRow(ctx context.Context, m NewMessage, queuedID *int64) (queries.ChatMessage, error) {
	tx.wroteHistory()
	row, err := tx.q.ChatMessageInsert(ctx, tx.insertParams(m, queuedID))
	if err != nil {
		return queries.ChatMessage{}, fmt.Errorf("insert %s message into chat %s: %w", m.Role, tx.chat.ID, err)
	}
	return row, nil
}

func (tx *Tx) insertParams(m NewMessage, queuedID *int64) queries.ChatMessageInsertParams {
	vis := m.Visibility
	if vis == "" {
		vis = VisibleToBoth
	}
	return queries.ChatMessageInsertParams{
		ChatID:          tx.chat.ID,
		Role:            m.Role,
		Content:         m.Content.Marshal(),
		Visibility:      vis,
		Compressed:      m.Compressed,
		QueuedMessageID: queuedID,
		ModelConfigID:   m.ModelConfigID,
		ReasoningEffort: m.ReasoningEffort,
		Usage:           m.Usage,
		CreatedBy:       m.CreatedBy,
		CreatedAt:       tx.now,
		TurnID:          m.TurnID,
	}
}

func (tx *Tx) insertMessages(ctx context.Context, ms []NewMessage) ([]queries.ChatMessage, error) {
	out := make([]queries.ChatMessage, 0, len(ms))
	for _, m := range ms {
		row, err := tx.insertMessage(ctx, m, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

// OpenToolCall is a tool call in active history that has no result yet.
type OpenToolCall struct {
	MessageID  int64
	ToolCallID string
	ToolName   string
}

// OpenToolCalls lists the tool calls in active history with no result.
// The result is read once and kept until the bundle next writes history
// (a step decision asks twice: pending dynamic calls, then open calls).
func (tx *Tx) OpenToolCalls(ctx context.Context) ([]OpenToolCall, error) {
	if tx.openRead {
		return slices.Clone(tx.openCalls), nil
	}
	rows, err := tx.q.ChatMessageOpenToolCalls(ctx, tx.chat.ID)
	if err != nil {
		return nil, fmt.Errorf("find open tool calls in chat %s: %w", tx.chat.ID, err)
	}
	out := make([]OpenToolCall, len(rows))
	for i, r := range rows {
		out[i] = OpenToolCall{MessageID: r.MessageID, ToolCallID: r.ToolCallID, ToolName: r.ToolName}
	}
	tx.openCalls, tx.openRead = slices.Clone(out), true
	return out, nil
}

// closeOpenToolCalls answers every open tool call with a synthetic
// cancellation result, all in one tool message, so history never carries a
// call without a result past a user message or out of requires_action.
func (tx *Tx) closeOpenToolCalls(ctx context.Context, reason string) ([]queries.ChatMessage, error) {
	open, err := tx.OpenToolCalls(ctx)
	if err != nil || len(open) == 0 {
		return nil, err
	}
	result, _ := json.Marshal(map[string]string{"error": "tool call canceled: " + reason})
	content := make(chatmsg.Content, len(open))
	for i, c := range open {
		content[i] = chatmsg.ToolResult(c.ToolCallID, c.ToolName, result, true)
	}
	row, err := tx.insertMessage(ctx, NewMessage{Role: RoleTool, Content: content}, nil)
	if err != nil {
		return nil, err
	}
	return []queries.ChatMessage{row}, nil
}

// insertUserTurn inserts a user message into active history, answering open
// tool calls first.
func (tx *Tx) insertUserTurn(ctx context.Context, m NewMessage, queuedID *int64, reason string) ([]queries.ChatMessage, queries.ChatMessage, error) {
	closed, err := tx.closeOpenToolCalls(ctx, reason)
	if err != nil {
		return nil, queries.ChatMessage{}, err
	}
	row, err := tx.insertMessage(ctx, m, queuedID)
	return closed, row, err
}

// startTurn is insertUserTurn then write(e), the message's insert and the
// execution write sent together (one round trip) once the open calls are
// answered.
func (tx *Tx) startTurn(ctx context.Context, m NewMessage, reason string, e execution) (queries.ChatMessage, error) {
	if _, err := tx.closeOpenToolCalls(ctx, reason); err != nil {
		return queries.ChatMessage{}, err
	}
	if err := m.validate(); err != nil {
		return queries.ChatMessage{}, err
	}
	if tx.reservedMessageID != nil && tx.canHold() {
		return tx.holdTurnStart(ctx, m, e), nil
	}
	tx.wroteHistory()
	row, chat, err := tx.q.ChatMessageInsertAndSetExecution(ctx, tx.insertParams(m, nil), tx.executionParams(e))
	if err != nil {
		return queries.ChatMessage{}, fmt.Errorf("start a turn in chat %s: %w", tx.chat.ID, err)
	}
	tx.setChat(chat)
	return row, nil
}

// holdTurnStart is startTurn's insert and execution write held for the
// commit (held_write.go), the message under the ID the bundle reserved
// with its lock (WithMessageID): the api's SendMessage then commits in two
// round trips, where it took three, on the way to a turn's first part.
// The message and the chat row are predicted exactly (the chat is locked;
// the triggers' rules are predictTurnStart's); the caller has the
// predicted message.
func (tx *Tx) holdTurnStart(ctx context.Context, m NewMessage, e execution) queries.ChatMessage {
	id := *tx.reservedMessageID
	tx.reservedMessageID = nil
	ins, exec := tx.insertParams(m, nil), tx.executionParams(e)
	insert := queries.ChatMessageInsertWithIDParams{
		ID: id, ChatID: ins.ChatID, Role: ins.Role, Content: ins.Content, Visibility: ins.Visibility,
		Compressed: ins.Compressed, QueuedMessageID: ins.QueuedMessageID, ModelConfigID: ins.ModelConfigID,
		ReasoningEffort: ins.ReasoningEffort, Usage: ins.Usage, CreatedBy: ins.CreatedBy, CreatedAt: ins.CreatedAt,
		TurnID: ins.TurnID,
	}
	// The row as the insert leaves it: its revision is the snapshot's
	// (set_chat_message_revision), its time as Postgres stores it.
	msg := queries.ChatMessage{
		ID: id, ChatID: ins.ChatID, Role: ins.Role, Content: ins.Content, Visibility: ins.Visibility,
		Compressed: ins.Compressed, QueuedMessageID: ins.QueuedMessageID, Revision: tx.chat.SnapshotVersion,
		ModelConfigID: ins.ModelConfigID, ReasoningEffort: ins.ReasoningEffort, Usage: ins.Usage,
		CreatedBy: ins.CreatedBy, CreatedAt: ins.CreatedAt.Truncate(time.Microsecond), TurnID: ins.TurnID,
	}
	held := &heldInsert{predicted: msg, write: func(q *queries.Queries) (queries.ChatMessage, error) {
		return q.ChatMessageInsertWithID(ctx, insert)
	}}
	// History is written once the held insert is sent: what the bundle
	// reads of it from here on is not committed (HistoryCache), and the
	// open tool calls are read again.
	tx.historyWritten, tx.openRead, tx.openCalls = true, false, nil
	tx.hold(fmt.Sprintf("start a turn in chat %s", tx.chat.ID), predictTurnStart(tx.chat, exec),
		func(q *queries.Queries) (queries.Chat, error) { return q.ChatSetExecution(ctx, exec) }).insert = held
	return msg
}

// predictTurnStart is the chat row c as a turn's user message insert and
// the execution write p after it leave it: the insert's revision trigger
// moves history_version to the snapshot's and restarts the attempt count,
// the retry trigger drops a retry payload when the attempt changes or the
// status stops running (stamping its version with the snapshot's), and
// ChatSetExecution writes the rest.
func predictTurnStart(c queries.Chat, p queries.ChatSetExecutionParams) queries.Chat {
	dropRetry := func() {
		if c.RetryState != nil {
			c.RetryState, c.RetryStateVersion = nil, c.SnapshotVersion
		}
	}
	c.HistoryVersion = c.SnapshotVersion
	if c.GenerationAttempt != 0 {
		c.GenerationAttempt = 0
		dropRetry()
	}
	c.Status, c.LastError = p.Status, p.LastError
	if p.Status != StatusRunning {
		dropRetry()
	}
	c.RequiresActionDeadlineAt, c.CompactionRequestedAt = p.RequiresActionDeadlineAt, p.CompactionRequestedAt
	if p.ModelConfigID != nil {
		c.LastModelConfigID = p.ModelConfigID
	}
	if p.ReasoningEffort != nil {
		c.LastReasoningEffort = p.ReasoningEffort
	}
	c.UpdatedAt = p.Now.Truncate(time.Microsecond)
	return c
}

// promote moves queued message q into history as a user turn. The queue row
// must delete exactly one row; the history row carries its ID.
func (tx *Tx) promote(ctx context.Context, q queries.ChatQueuedMessage, reason string) (queries.ChatMessage, error) {
	tx.wroteQueue()
	n, err := tx.q.ChatQueuedMessageDelete(ctx, queries.ChatQueuedMessageDeleteParams{ChatID: tx.chat.ID, ID: q.ID})
	if err != nil {
		return queries.ChatMessage{}, fmt.Errorf("delete queued message %d of chat %s: %w", q.ID, tx.chat.ID, err)
	}
	if n != 1 {
		return queries.ChatMessage{}, fmt.Errorf("promote queued message %d of chat %s: deleted %d rows, want 1: %w", q.ID, tx.chat.ID, n, ErrQueuedMessageNotFound)
	}
	content, err := chatmsg.ParseContent(q.Content)
	if err != nil {
		return queries.ChatMessage{}, fmt.Errorf("promote queued message %d: %w", q.ID, err)
	}
	model, err := tx.promotionModel(ctx, q.ModelConfigID)
	if err != nil {
		return queries.ChatMessage{}, fmt.Errorf("promote queued message %d: %w", q.ID, err)
	}
	_, row, err := tx.insertUserTurn(ctx, NewMessage{
		Role: RoleUser, Content: content, ModelConfigID: model,
		ReasoningEffort: q.ReasoningEffort, CreatedBy: q.CreatedBy, TurnID: q.TurnID,
	}, &q.ID, reason)
	if err == nil {
		tx.promotedQueuedAt = append(tx.promotedQueuedAt, q.CreatedAt)
	}
	return row, err
}

// promotionModel revalidates the model a queued message is promoted with
// (spec "Organization-local model selection and fallback"): the message's
// stored config, or the chat's last one when it stored none, is kept while
// it is live, enabled, of an enabled provider and of the chat's
// organization. Otherwise the message runs on the organization's enabled
// default, which also becomes the chat's last_model_config_id. With no
// usable default the stored value is kept: promotion is part of
// transitions that must not fail on it (FinishTurn), and the worker's
// preparation reports the missing default when the turn runs.
func (tx *Tx) promotionModel(ctx context.Context, stored *uuid.UUID) (*uuid.UUID, error) {
	id := stored
	if id == nil {
		id = tx.chat.LastModelConfigID
	}
	if id == nil {
		return stored, nil
	}
	cur, err := tx.q.ChatModelConfigGetWithProvider(ctx, *id)
	switch {
	case err == nil:
		c := cur.ChatModelConfig
		if !c.Deleted && c.Enabled && cur.ProviderEnabled && c.OrganizationID == tx.chat.OrganizationID {
			return stored, nil
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("read model config %s: %w", *id, err)
	}
	def, err := tx.q.ChatModelConfigGetDefault(ctx, tx.chat.OrganizationID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return stored, nil
	case err != nil:
		return nil, fmt.Errorf("read the default model config of organization %s: %w", tx.chat.OrganizationID, err)
	case !def.ChatModelConfig.Enabled || !def.ProviderEnabled:
		return stored, nil
	}
	return &def.ChatModelConfig.ID, nil
}

// PromotedQueuedAt returns the queued created_at of each queued message the
// bundle promoted into history so far (spec "Turn span lifecycle", Promotion: a promoting
// transition returns it, and once the bundle commits its caller records
// the prompt's queue_wait from it). A promoted message's history row is
// created at the promotion, so this is the only record of when it queued.
func (tx *Tx) PromotedQueuedAt() []time.Time {
	return slices.Clone(tx.promotedQueuedAt)
}

// promoteHead promotes the queue head.
func (tx *Tx) promoteHead(ctx context.Context, reason string) (queries.ChatMessage, error) {
	head, err := tx.q.ChatQueuedMessageHead(ctx, tx.chat.ID)
	if err != nil {
		return queries.ChatMessage{}, fmt.Errorf("read queue head of chat %s: %w", tx.chat.ID, err)
	}
	return tx.promote(ctx, head, reason)
}

func (tx *Tx) getQueued(ctx context.Context, id int64) (queries.ChatQueuedMessage, error) {
	q, err := tx.q.ChatQueuedMessageGet(ctx, queries.ChatQueuedMessageGetParams{ChatID: tx.chat.ID, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return q, fmt.Errorf("queued message %d in chat %s: %w", id, tx.chat.ID, ErrQueuedMessageNotFound)
	}
	if err != nil {
		return q, fmt.Errorf("read queued message %d of chat %s: %w", id, tx.chat.ID, err)
	}
	return q, nil
}

// enqueue appends a message at the queue's tail.
func (tx *Tx) enqueue(ctx context.Context, m NewMessage) (queries.ChatQueuedMessage, error) {
	if err := m.validate(); err != nil {
		return queries.ChatQueuedMessage{}, err
	}
	tx.wroteQueue()
	q, err := tx.q.ChatQueuedMessageInsert(ctx, queries.ChatQueuedMessageInsertParams{
		ChatID: tx.chat.ID, Content: m.Content.Marshal(), ModelConfigID: m.ModelConfigID,
		ReasoningEffort: m.ReasoningEffort, CreatedBy: m.CreatedBy, CreatedAt: tx.now, TurnID: m.TurnID,
	})
	if err != nil {
		return q, fmt.Errorf("queue message in chat %s: %w", tx.chat.ID, err)
	}
	return q, nil
}
