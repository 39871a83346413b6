package chatstate

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
)

// Acquire makes (workerID, runnerID) the chat's owner and inserts the
// runner's initial heartbeat row, on Postgres's clock (never the bundle's
// injected one: a lease is judged by statement_timestamp()). It does not touch execution state, so a
// pending compaction request is carried. In a bundle its write waits for
// the bundle's next statement or its commit and travels with it
// (held_write.go).
func (tx *Tx) Acquire(ctx context.Context, workerID, runnerID uuid.UUID) error {
	from, err := tx.begin(Acquire)
	if err != nil {
		return err
	}
	params := queries.ChatSetOwnerWithHeartbeatParams{ID: tx.chat.ID, WorkerID: workerID, RunnerID: runnerID}
	what := fmt.Sprintf("acquire chat %s for runner %s", tx.chat.ID, runnerID)
	write := func(q *queries.Queries) (queries.Chat, error) { return q.ChatSetOwnerWithHeartbeat(ctx, params) }
	tx.freshRunner = &runnerID
	if tx.canHold() {
		// The row as the write will leave it: the owner is all it changes.
		predicted := tx.chat
		predicted.WorkerID, predicted.RunnerID = &workerID, &runnerID
		tx.hold(what, predicted, write)
		return tx.landOwnership(Acquire, from)
	}
	row, err := tx.q.ChatSetOwnerWithHeartbeat(ctx, params)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	tx.setChat(row)
	return tx.landOwnership(Acquire, from)
}

// Abandon clears the chat's owner.
func (tx *Tx) Abandon(ctx context.Context) error {
	from, err := tx.begin(Abandon)
	if err != nil {
		return err
	}
	row, err := tx.q.ChatSetOwner(ctx, queries.ChatSetOwnerParams{ID: tx.chat.ID})
	if err != nil {
		return fmt.Errorf("abandon chat %s: %w", tx.chat.ID, err)
	}
	tx.setChat(row)
	return tx.land(ctx, Abandon, from, "")
}

// Step is one durable message suffix a worker commits while running.
type Step struct {
	Messages []NewMessage
	// ConsumesCompaction is set by the compaction step: it clears
	// compaction_requested_at in the same bundle as the summary triplet.
	ConsumesCompaction bool
}

// CommitStep inserts one step's messages and stays running.
func (tx *Tx) CommitStep(ctx context.Context, step Step) ([]queries.ChatMessage, error) {
	from, err := tx.begin(CommitStep)
	if err != nil {
		return nil, err
	}
	if len(step.Messages) == 0 {
		return nil, fmt.Errorf("a step needs at least one message: %w", ErrInvalidArgument)
	}
	rows, err := tx.insertMessages(ctx, step.Messages)
	if err != nil {
		return nil, err
	}
	if step.ConsumesCompaction && tx.chat.CompactionRequestedAt != nil {
		e := tx.carry(StatusRunning)
		e.compaction = nil
		if err := tx.write(ctx, e); err != nil {
			return nil, err
		}
	}
	return rows, tx.land(ctx, CommitStep, from, "")
}

// EnterRequiresAction parks a running chat until the client submits results
// for the pending dynamic tool calls already committed in history. The
// deadline is the machine's RequiresActionTimeout from the bundle's clock
// (Postgres's in every service), so a worker whose clock is behind or
// ahead sets no early or late deadline.
func (tx *Tx) EnterRequiresAction(ctx context.Context) error {
	from, err := tx.begin(EnterRequiresAction)
	if err != nil {
		return err
	}
	pending, err := tx.PendingDynamicToolCalls(ctx)
	if err != nil {
		return err
	}
	if len(pending) == 0 {
		return fmt.Errorf("chat %s has no pending dynamic tool calls: %w", tx.chat.ID, ErrInvalidArgument)
	}
	deadline := tx.now.Add(tx.m.cfg.RequiresActionTimeout)
	if err := tx.write(ctx, execution{status: StatusRequiresAction, deadline: &deadline}); err != nil {
		return err
	}
	return tx.land(ctx, EnterRequiresAction, from, "")
}

// PendingDynamicToolCalls lists open tool calls whose tool is one of the
// chat's dynamic tools (executed by the client, not the worker).
func (tx *Tx) PendingDynamicToolCalls(ctx context.Context) ([]OpenToolCall, error) {
	open, err := tx.OpenToolCalls(ctx)
	if err != nil || len(open) == 0 {
		return nil, err
	}
	names, err := DynamicToolNames(tx.chat.DynamicTools)
	if err != nil {
		return nil, err
	}
	var out []OpenToolCall
	for _, c := range open {
		if names[c.ToolName] {
			out = append(out, c)
		}
	}
	return out, nil
}

// DynamicToolNames reads the names out of chats.dynamic_tools.
func DynamicToolNames(raw json.RawMessage) (map[string]bool, error) {
	var tools []struct {
		Name string `json:"name"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &tools); err != nil {
			return nil, fmt.Errorf("decode dynamic tools: %w", err)
		}
	}
	names := make(map[string]bool, len(tools))
	for _, t := range tools {
		names[t.Name] = true
	}
	return names, nil
}

// FinishResult reports a transition that may promote the queue head.
type FinishResult struct {
	// Promoted is the queue head moved into history, if any.
	Promoted *queries.ChatMessage
}

// FinishInterruption commits the interrupted partial suffix (if any) and
// ends the interruption: I0 lands in waiting; I1 promotes the queue head and
// lands in running.
func (tx *Tx) FinishInterruption(ctx context.Context, partial []NewMessage) (FinishResult, error) {
	from, err := tx.begin(FinishInterruption)
	if err != nil {
		return FinishResult{}, err
	}
	if _, err := tx.insertMessages(ctx, partial); err != nil {
		return FinishResult{}, err
	}
	// No call is left open: a stored step's calls that were running (or
	// not yet started) and the partial's own calls are answered as
	// interrupted, so the chat waits with a history a provider accepts.
	if _, err := tx.closeOpenToolCalls(ctx, ReasonInterrupted); err != nil {
		return FinishResult{}, err
	}
	return tx.finishOrPromote(ctx, FinishInterruption, from, ReasonInterrupted)
}

// FinishTurn completes the turn: with an empty queue the chat waits; else
// the queue head becomes the next user turn and the chat keeps running.
func (tx *Tx) FinishTurn(ctx context.Context) (FinishResult, error) {
	from, err := tx.begin(FinishTurn)
	if err != nil {
		return FinishResult{}, err
	}
	return tx.finishOrPromote(ctx, FinishTurn, from, ReasonNewUserMessage)
}

func (tx *Tx) finishOrPromote(ctx context.Context, t Transition, from State, reason string) (FinishResult, error) {
	if tx.queueLen == 0 {
		if err := tx.write(ctx, execution{status: StatusWaiting}); err != nil {
			return FinishResult{}, err
		}
		variant := ""
		if t == FinishTurn {
			variant = VariantQueueEmpty
		}
		return FinishResult{}, tx.land(ctx, t, from, variant)
	}
	row, err := tx.promoteHead(ctx, reason)
	if err != nil {
		return FinishResult{}, err
	}
	e := execution{status: StatusRunning, modelConfigID: row.ModelConfigID, reasoningEffort: row.ReasoningEffort}
	if err := tx.write(ctx, e); err != nil {
		return FinishResult{}, err
	}
	variant := VariantPromotedHeadStill
	if tx.queueLen-1 == 0 {
		variant = VariantPromotedLast
	}
	return FinishResult{Promoted: &row}, tx.land(ctx, t, from, variant)
}

// RecordGenerationAttempt counts one more model call on the current history
// version; the trigger drops the previous attempt's retry state.
func (tx *Tx) RecordGenerationAttempt(ctx context.Context) error {
	from, err := tx.begin(RecordGenerationAttempt)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("record generation attempt of chat %s", tx.chat.ID)
	write := func(q *queries.Queries) (queries.Chat, error) {
		return q.ChatIncrementGenerationAttempt(ctx, tx.chat.ID)
	}
	if tx.canHold() {
		// A worker's Acquire bundle records its runner's first attempt
		// right after Acquire: both writes go with the commit. The row as
		// the write leaves it: the attempt counts one more, and the retry
		// trigger clears a retry payload, stamping its version with the
		// snapshot's (sync_chat_retry_state).
		predicted := tx.chat
		predicted.GenerationAttempt++
		if predicted.RetryState != nil {
			predicted.RetryState, predicted.RetryStateVersion = nil, predicted.SnapshotVersion
		}
		tx.hold(what, predicted, write)
		return tx.land(ctx, RecordGenerationAttempt, from, "")
	}
	var row queries.Chat
	var incErr error
	if err := tx.withHeld(ctx, func(q *queries.Queries) { row, incErr = write(q) }); err != nil {
		return err
	}
	if incErr != nil {
		return fmt.Errorf("%s: %w", what, incErr)
	}
	tx.setChat(row)
	return tx.land(ctx, RecordGenerationAttempt, from, "")
}

// RetryState is the payload clients see while a failed attempt waits to be
// retried.
type RetryState struct {
	Attempt    int64     `json:"attempt"`
	DelayMS    int64     `json:"delay_ms"`
	Error      string    `json:"error"`
	Kind       string    `json:"kind"`
	RetryingAt time.Time `json:"retrying_at"`
}

// RecordRetryState stores the retry payload on a running chat.
func (tx *Tx) RecordRetryState(ctx context.Context, state RetryState) error {
	from, err := tx.begin(RecordRetryState)
	if err != nil {
		return err
	}
	payload, err := json.Marshal(state)
	if err != nil {
		return fmt.Errorf("encode retry state: %w", err)
	}
	row, err := tx.q.ChatSetRetryState(ctx, queries.ChatSetRetryStateParams{ID: tx.chat.ID, RetryState: payload})
	if err != nil {
		return fmt.Errorf("record retry state of chat %s: %w", tx.chat.ID, err)
	}
	tx.setChat(row)
	return tx.land(ctx, RecordRetryState, from, "")
}

// FinishError parks the chat in error with last_error = msg.
func (tx *Tx) FinishError(ctx context.Context, msg string) error {
	from, err := tx.begin(FinishError)
	if err != nil {
		return err
	}
	if msg == "" {
		return fmt.Errorf("FinishError needs an error message: %w", ErrInvalidArgument)
	}
	if err := tx.write(ctx, execution{status: StatusError, lastError: &msg}); err != nil {
		return err
	}
	return tx.land(ctx, FinishError, from, "")
}

// CancelRequiresAction closes the pending dynamic tool calls with synthetic
// cancellation results and lands in running.
func (tx *Tx) CancelRequiresAction(ctx context.Context, reason string) error {
	from, err := tx.begin(CancelRequiresAction)
	if err != nil {
		return err
	}
	if reason == "" {
		reason = ReasonRequiresActionTimeout
	}
	if _, err := tx.closeOpenToolCalls(ctx, reason); err != nil {
		return err
	}
	if err := tx.write(ctx, execution{status: StatusRunning}); err != nil {
		return err
	}
	return tx.land(ctx, CancelRequiresAction, from, "")
}
