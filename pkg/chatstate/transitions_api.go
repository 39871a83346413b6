package chatstate

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
)

// BusyBehavior says what SendMessage does when the chat is busy.
type BusyBehavior string

// The busy behaviours.
const (
	BusyQueue     BusyBehavior = "queue"
	BusyInterrupt BusyBehavior = "interrupt"
)

// SendMessageResult reports what SendMessage did with the message.
type SendMessageResult struct {
	// Queued is true when the message waits in the queue.
	Queued bool
	// Message is the sent message when it went straight into history.
	Message *queries.ChatMessage
	// Messages are the user messages promoted into history by this bundle
	// (the sent one when it went straight in, or a promoted queue head).
	Messages []queries.ChatMessage
	// QueuedMessage is the queue row of the sent message when it was queued.
	QueuedMessage *queries.ChatQueuedMessage
}

// SendMessage inserts a user message when the chat is idle or queues it when
// the chat is busy. With BusyInterrupt it also requests interruption (and,
// when no worker owns the chat, finishes it in the same bundle) or cancels a
// pending dynamic-tool action.
func (tx *Tx) SendMessage(ctx context.Context, m NewMessage, behavior BusyBehavior) (SendMessageResult, error) {
	t := SendMessageQueue
	switch behavior {
	case BusyQueue:
	case BusyInterrupt:
		t = SendMessageInterrupt
	default:
		return SendMessageResult{}, fmt.Errorf("busy_behavior %q must be queue or interrupt: %w", behavior, ErrInvalidArgument)
	}
	m.Role = RoleUser
	from, err := tx.begin(t)
	if err != nil {
		return SendMessageResult{}, err
	}
	var res SendMessageResult
	switch from {
	case W, E0:
		e := execution{status: StatusRunning, modelConfigID: m.ModelConfigID, reasoningEffort: m.ReasoningEffort}
		row, err := tx.startTurn(ctx, m, ReasonNewUserMessage, e)
		if err != nil {
			return res, err
		}
		res.Message, res.Messages = &row, []queries.ChatMessage{row}
	case E1:
		// Append to the tail, promote the current head, clear the error.
		if err := tx.queueInto(ctx, m, &res); err != nil {
			return res, err
		}
		row, err := tx.promoteHead(ctx, ReasonNewUserMessage)
		if err != nil {
			return res, err
		}
		res.Messages = []queries.ChatMessage{row}
		e := execution{status: StatusRunning, modelConfigID: row.ModelConfigID, reasoningEffort: row.ReasoningEffort}
		if err := tx.write(ctx, e); err != nil {
			return res, err
		}
	default: // busy: R0 R1 I0 I1 A0 A1
		if err := tx.queueInto(ctx, m, &res); err != nil {
			return res, err
		}
		if t == SendMessageQueue {
			// Queueing on a busy chat keeps the turn, and its compaction
			// request, alive.
			if err := tx.write(ctx, tx.carry(tx.chat.Status)); err != nil {
				return res, err
			}
			break
		}
		switch from {
		case R0, R1, I0, I1:
			if err := tx.write(ctx, execution{status: StatusInterrupting}); err != nil {
				return res, err
			}
		case A0, A1:
			if _, err := tx.closeOpenToolCalls(ctx, ReasonNewUserMessage); err != nil {
				return res, err
			}
			if err := tx.write(ctx, execution{status: StatusRunning}); err != nil {
				return res, err
			}
		}
	}
	if err := tx.land(ctx, t, from, ""); err != nil {
		return res, err
	}
	if t == SendMessageInterrupt && tx.State() == I1 && tx.chat.WorkerID == nil {
		// Nothing is generating: finish the interruption now so the queue
		// head is promoted without waiting for a worker.
		fin, err := tx.FinishInterruption(ctx, nil)
		if err != nil {
			return res, err
		}
		if fin.Promoted != nil {
			res.Messages = append(res.Messages, *fin.Promoted)
			if res.QueuedMessage != nil && fin.Promoted.QueuedMessageID != nil && *fin.Promoted.QueuedMessageID == res.QueuedMessage.ID {
				// The sent message was the head: it is in history now.
				res.Queued, res.Message, res.QueuedMessage = false, fin.Promoted, nil
			}
		}
	}
	return res, nil
}

func (tx *Tx) queueInto(ctx context.Context, m NewMessage, res *SendMessageResult) error {
	q, err := tx.enqueue(ctx, m)
	if err != nil {
		return err
	}
	res.Queued, res.QueuedMessage = true, &q
	return nil
}

// EditMessage replaces active user message id and everything after it: it
// clears the queue, soft-deletes the truncated suffix, inserts the
// replacement followed by suffix, and lands in running. Active work is
// obsoleted by the history change; partial output is not kept.
func (tx *Tx) EditMessage(ctx context.Context, id int64, replacement NewMessage, suffix []NewMessage) ([]queries.ChatMessage, error) {
	from, err := tx.begin(EditMessage)
	if err != nil {
		return nil, err
	}
	if _, err := tx.editTarget(ctx, id); err != nil {
		return nil, err
	}
	tx.wroteQueue()
	if _, err := tx.q.ChatQueuedMessageDeleteAll(ctx, tx.chat.ID); err != nil {
		return nil, fmt.Errorf("clear queue of chat %s: %w", tx.chat.ID, err)
	}
	tx.wroteHistory()
	if _, err := tx.q.ChatMessageSoftDeleteFrom(ctx, queries.ChatMessageSoftDeleteFromParams{ChatID: tx.chat.ID, FromID: id}); err != nil {
		return nil, fmt.Errorf("truncate history of chat %s at %d: %w", tx.chat.ID, id, err)
	}
	replacement.Role = RoleUser
	closed, row, err := tx.insertUserTurn(ctx, replacement, nil, ReasonNewUserMessage)
	if err != nil {
		return nil, err
	}
	rest, err := tx.insertMessages(ctx, suffix)
	if err != nil {
		return nil, err
	}
	e := execution{status: StatusRunning, modelConfigID: replacement.ModelConfigID, reasoningEffort: replacement.ReasoningEffort}
	if err := tx.write(ctx, e); err != nil {
		return nil, err
	}
	out := append(append(closed, row), rest...)
	return out, tx.land(ctx, EditMessage, from, "")
}

// DeleteQueuedMessage removes one queued message without touching history.
func (tx *Tx) DeleteQueuedMessage(ctx context.Context, id int64) error {
	from, err := tx.begin(DeleteQueuedMessage)
	if err != nil {
		return err
	}
	tx.wroteQueue()
	n, err := tx.q.ChatQueuedMessageDelete(ctx, queries.ChatQueuedMessageDeleteParams{ChatID: tx.chat.ID, ID: id})
	if err != nil {
		return fmt.Errorf("delete queued message %d of chat %s: %w", id, tx.chat.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("queued message %d in chat %s: %w", id, tx.chat.ID, ErrQueuedMessageNotFound)
	}
	return tx.land(ctx, DeleteQueuedMessage, from, queueVariant(tx.queueLen-1, VariantRemovedLast))
}

// queueVariant names the landing variant from the queue length after the
// change: "queue still non-empty" or the given emptied wording.
func queueVariant(remaining int64, emptied string) string {
	if remaining > 0 {
		return VariantQueueNonEmpty
	}
	return emptied
}

// PromoteResult reports a promotion.
type PromoteResult struct {
	// Message is the promoted history row when the message went straight
	// into history (from E1, A1, or an unowned interruption).
	Message *queries.ChatMessage
}

// PromoteQueuedMessage makes queued message id the next to process. From E1
// and A1 it goes into history at once; from R1 and I1 it moves to the queue
// head and the chat is interrupted, so FinishInterruption promotes it — in
// the same bundle when no worker owns the chat.
func (tx *Tx) PromoteQueuedMessage(ctx context.Context, id int64) (PromoteResult, error) {
	from, err := tx.begin(PromoteQueuedMessage)
	if err != nil {
		return PromoteResult{}, err
	}
	q, err := tx.getQueued(ctx, id)
	if err != nil {
		return PromoteResult{}, err
	}
	var res PromoteResult
	switch from {
	case E1, A1:
		row, err := tx.promote(ctx, q, ReasonPromoted)
		if err != nil {
			return res, err
		}
		res.Message = &row
		e := execution{status: StatusRunning, modelConfigID: row.ModelConfigID, reasoningEffort: row.ReasoningEffort}
		if err := tx.write(ctx, e); err != nil {
			return res, err
		}
		return res, tx.land(ctx, PromoteQueuedMessage, from, queueVariant(tx.queueLen-1, VariantPromotedLast))
	}
	// R1, I1
	tx.wroteQueue()
	if _, err := tx.q.ChatQueuedMessageMoveToHead(ctx, queries.ChatQueuedMessageMoveToHeadParams{ChatID: tx.chat.ID, ID: id}); err != nil {
		return res, fmt.Errorf("move queued message %d of chat %s to the head: %w", id, tx.chat.ID, err)
	}
	if err := tx.write(ctx, execution{status: StatusInterrupting}); err != nil {
		return res, err
	}
	if err := tx.land(ctx, PromoteQueuedMessage, from, ""); err != nil {
		return res, err
	}
	if tx.chat.WorkerID == nil {
		fin, err := tx.FinishInterruption(ctx, nil)
		if err != nil {
			return res, err
		}
		res.Message = fin.Promoted
	}
	return res, nil
}

// InterruptResult reports what Interrupt did.
type InterruptResult struct {
	// Finished is true when no worker owned the chat and the bundle also
	// applied FinishInterruption.
	Finished bool
	// Promoted is the queue head FinishInterruption promoted, if any.
	Promoted *queries.ChatMessage
}

// Interrupt requests cancellation of active generation (R0, R1) or closes a
// pending dynamic-tool action (A0, A1), preserving the queue. When no worker
// owns the chat nothing is generating, so the bundle also applies
// FinishInterruption; that is also how an unowned chat already in I0 or I1
// is finished. An owned interrupting chat is rejected: its runner finishes.
func (tx *Tx) Interrupt(ctx context.Context) (InterruptResult, error) {
	var res InterruptResult
	unowned := tx.chat.WorkerID == nil
	if s := tx.State(); (s == I0 || s == I1) && unowned {
		fin, err := tx.FinishInterruption(ctx, nil)
		return InterruptResult{Finished: true, Promoted: fin.Promoted}, err
	}
	from, err := tx.begin(Interrupt)
	if err != nil {
		return res, err
	}
	switch from {
	case R0, R1:
		if err := tx.write(ctx, execution{status: StatusInterrupting}); err != nil {
			return res, err
		}
	case A0, A1:
		if _, err := tx.closeOpenToolCalls(ctx, ReasonInterrupted); err != nil {
			return res, err
		}
		if err := tx.write(ctx, execution{status: StatusRunning}); err != nil {
			return res, err
		}
	}
	if err := tx.land(ctx, Interrupt, from, ""); err != nil {
		return res, err
	}
	if s := tx.State(); (s == I0 || s == I1) && unowned {
		fin, err := tx.FinishInterruption(ctx, nil)
		if err != nil {
			return res, err
		}
		res.Finished, res.Promoted = true, fin.Promoted
	}
	return res, nil
}

// ToolResult is a client's result for a dynamic tool call.
type ToolResult struct {
	ToolCallID string
	Output     json.RawMessage
	IsError    bool
}

// CompleteRequiresAction inserts the submitted results for every pending
// dynamic tool call (all of them, each once), then suffix, clears the
// deadline and lands in running with the queue kept.
func (tx *Tx) CompleteRequiresAction(ctx context.Context, results []ToolResult, suffix []NewMessage) ([]queries.ChatMessage, error) {
	from, err := tx.begin(CompleteRequiresAction)
	if err != nil {
		return nil, err
	}
	open, err := tx.OpenToolCalls(ctx)
	if err != nil {
		return nil, err
	}
	content, err := matchResults(open, results)
	if err != nil {
		return nil, err
	}
	row, err := tx.insertMessage(ctx, NewMessage{Role: RoleTool, Content: content}, nil)
	if err != nil {
		return nil, err
	}
	rest, err := tx.insertMessages(ctx, suffix)
	if err != nil {
		return nil, err
	}
	if err := tx.write(ctx, execution{status: StatusRunning}); err != nil {
		return nil, err
	}
	return append([]queries.ChatMessage{row}, rest...), tx.land(ctx, CompleteRequiresAction, from, "")
}

// matchResults pairs results with the open calls, in call order.
func matchResults(open []OpenToolCall, results []ToolResult) (chatmsg.Content, error) {
	byID := make(map[string]ToolResult, len(results))
	for _, r := range results {
		if r.ToolCallID == "" {
			return nil, fmt.Errorf("a tool result has no tool_call_id: %w", ErrInvalidArgument)
		}
		if _, dup := byID[r.ToolCallID]; dup {
			return nil, fmt.Errorf("tool call %s has two results: %w", r.ToolCallID, ErrInvalidArgument)
		}
		byID[r.ToolCallID] = r
	}
	content := make(chatmsg.Content, 0, len(open))
	var missing []string
	for _, c := range open {
		r, ok := byID[c.ToolCallID]
		if !ok {
			missing = append(missing, c.ToolCallID)
			continue
		}
		delete(byID, c.ToolCallID)
		out := r.Output
		if len(out) == 0 || !json.Valid(out) {
			out, _ = json.Marshal(string(r.Output)) // plain text output becomes a JSON string
		}
		content = append(content, chatmsg.ToolResult(c.ToolCallID, c.ToolName, out, r.IsError))
	}
	for id := range byID {
		return nil, fmt.Errorf("tool call %s is not pending in this chat: %w", id, ErrInvalidArgument)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing results for pending tool calls %v: %w", missing, ErrInvalidArgument)
	}
	return content, nil
}

// RequestCompaction records a manual compaction request on an idle or
// errored chat and lands in running without inserting a message. It
// advances history_version and resets generation_attempt itself.
func (tx *Tx) RequestCompaction(ctx context.Context) error {
	from, err := tx.begin(RequestCompaction)
	if err != nil {
		return err
	}
	now := tx.now
	row, err := tx.q.ChatRequestCompaction(ctx, queries.ChatRequestCompactionParams{ID: tx.chat.ID, Now: &now})
	if err != nil {
		return fmt.Errorf("request compaction of chat %s: %w", tx.chat.ID, err)
	}
	tx.setChat(row)
	return tx.land(ctx, RequestCompaction, from, "")
}

// ClearContext commits a clear boundary (see ClearBoundary) synchronously,
// clears last_error and any compaction request, leaves ownership alone and
// lands in waiting.
func (tx *Tx) ClearContext(ctx context.Context, boundary []NewMessage) ([]queries.ChatMessage, error) {
	from, err := tx.begin(ClearContext)
	if err != nil {
		return nil, err
	}
	if len(boundary) == 0 {
		return nil, fmt.Errorf("clear context needs its boundary messages: %w", ErrInvalidArgument)
	}
	closed, err := tx.closeOpenToolCalls(ctx, ReasonNewUserMessage)
	if err != nil {
		return nil, err
	}
	rows, err := tx.insertMessages(ctx, boundary)
	if err != nil {
		return nil, err
	}
	if err := tx.write(ctx, execution{status: StatusWaiting}); err != nil {
		return nil, err
	}
	return append(closed, rows...), tx.land(ctx, ClearContext, from, "")
}

// ClearBoundary builds the clear boundary triplet: a hidden model-only
// sentinel user row that prompt assembly prunes at, then a visible
// chat_cleared tool call and its result. callID names the synthetic call.
func ClearBoundary(callID string) []NewMessage {
	args := json.RawMessage(`{}`)
	result := json.RawMessage(`{"cleared":true}`)
	return []NewMessage{
		{Role: RoleUser, Visibility: VisibleToModel, Compressed: true,
			Content: chatmsg.Content{chatmsg.Text("The conversation context was cleared. Earlier messages are intentionally unavailable; continue from here.")}},
		{Role: RoleAssistant, Visibility: VisibleToUser, Compressed: true,
			Content: chatmsg.Content{chatmsg.ToolCall(callID, "chat_cleared", args)}},
		{Role: RoleTool, Visibility: VisibleToUser, Compressed: true,
			Content: chatmsg.Content{chatmsg.ToolResult(callID, "chat_cleared", result, false)}},
	}
}

// SetArchived sets or clears the archived marker of this one chat. Use
// Machine.SetFamilyArchived for the endpoint's whole-family semantics.
func (tx *Tx) SetArchived(ctx context.Context, archived bool) error {
	t := SetArchivedFalse
	if archived {
		t = SetArchivedTrue
	}
	from, err := tx.begin(t)
	if err != nil {
		return err
	}
	row, err := tx.q.ChatSetArchived(ctx, queries.ChatSetArchivedParams{ID: tx.chat.ID, Archived: archived, Now: tx.now})
	if err != nil {
		return fmt.Errorf("set archived=%t on chat %s: %w", archived, tx.chat.ID, err)
	}
	tx.setChat(row)
	return tx.land(ctx, t, from, "")
}

// ReconcileInvalidState moves a chat in an invalid state to E0 or E1:
// unarchived, error status with an explanatory last_error, no deadline, and
// synthetic results for pending tool calls.
func (tx *Tx) ReconcileInvalidState(ctx context.Context) error {
	from, err := tx.begin(ReconcileInvalidState)
	if err != nil {
		return err
	}
	if _, err := tx.closeOpenToolCalls(ctx, ReasonInvalidState); err != nil {
		return err
	}
	msg := InvalidStateError
	row, err := tx.q.ChatReconcileInvalid(ctx, queries.ChatReconcileInvalidParams{ID: tx.chat.ID, LastError: &msg, Now: tx.now})
	if err != nil {
		return fmt.Errorf("reconcile chat %s: %w", tx.chat.ID, err)
	}
	tx.setChat(row)
	variant := VariantNoQueued
	if tx.queueLen > 0 {
		variant = VariantQueued
	}
	return tx.land(ctx, ReconcileInvalidState, from, variant)
}

// InvalidStateError is the last_error ReconcileInvalidState writes.
const InvalidStateError = "This chat was in an invalid state and has been stopped. Send a new message or edit the history to continue."
