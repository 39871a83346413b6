package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/telemetry"
)

// update applies fn as one fenced bundle: the fence is checked first, and a
// committed bundle's snapshot is fed back to the loop (the fast path).
func (r *runner) update(ctx context.Context, in intent, fn func(tx *chatstate.Tx) error) (chatstate.Result, error) {
	return r.updateThen(ctx, in, fn, nil)
}

// updateThen is update, calling committed (when not nil) with the result
// before the snapshot is fed back to the loop.
func (r *runner) updateThen(ctx context.Context, in intent, fn func(tx *chatstate.Tx) error, committed func(chatstate.Result)) (chatstate.Result, error) {
	res, err := r.deps.Machine.Update(ctx, r.spec.ChatID, func(tx *chatstate.Tx) error {
		if err := tx.CheckFence(in.fence()); err != nil {
			return err
		}
		return fn(tx)
	})
	if err != nil {
		return res, err
	}
	if committed != nil {
		committed(res)
	}
	r.submit(EventFromChat(res.Chat))
	return res, nil
}

// view runs fn on a fenced, read-only look at the chat: nothing is bumped
// or announced, so reading does not wake every watcher.
func (r *runner) view(ctx context.Context, in intent, fn func(tx *chatstate.Tx) error) error {
	return r.deps.Machine.View(ctx, r.spec.ChatID, func(tx *chatstate.Tx) error {
		if err := tx.CheckFence(in.fence()); err != nil {
			return err
		}
		return fn(tx)
	})
}

// interrupt is the interrupt goroutine: it closes the episode of the
// current (history_version, generation_attempt), keeps what it streamed
// as the partial assistant message, with the model call's runtime up to
// the interrupt (spec "Message part buffer": ModelInvokedAt, read before
// the episode closes), and applies FinishInterruption.
//
// It reads the attempt, closes the episode and finishes in one bundle: the
// episode's parts are read under the same lock that fences the transition.
func (r *runner) interrupt(ctx context.Context, in intent) error {
	// The open turn is invalidated as interrupted before the commit, so a
	// prompt the commit promotes cannot close it first; it is settled after
	// (spec "Turn span lifecycle", Interrupt).
	tctx := r.turns.openToken(ctx)
	var queuedAt *time.Time
	defer func() {
		r.turns.settle(tctx, r.clock.Now())
		if queuedAt != nil {
			r.turns.recordQueueWait(*queuedAt, r.clock.Now())
		}
	}()
	_, err := r.update(ctx, in, func(tx *chatstate.Tx) error {
		ep := partbuf.Episode{ChatID: r.spec.ChatID, HistoryVersion: in.HistoryVersion, GenerationAttempt: tx.Chat().GenerationAttempt}
		var parts []partbuf.Part
		var runtime time.Duration
		if r.deps.Parts != nil {
			if invoked := r.deps.Parts.ModelInvokedAt(ep); !invoked.IsZero() {
				runtime = max(r.clock.Now().Sub(invoked), 0)
			}
			r.deps.Parts.CloseEpisode(ep)
			var err error
			parts, err = r.deps.Parts.GetParts(ep)
			if err != nil && !errors.Is(err, partbuf.ErrEpisodeNotFound) {
				return fmt.Errorf("error reading parts of episode %s: %w", ep, err)
			}
		}
		finished, err := finishedResults(ctx, tx)
		if err != nil {
			return err
		}
		r.turns.invalidate(tctx, telemetry.OutcomeInterrupted, nil)
		queuedAt = queueHead(ctx, tx)
		_, err = tx.FinishInterruption(ctx, append(finished, partialMessage(parts, runtime)...))
		return err
	})
	if err != nil {
		queuedAt = nil // nothing was promoted
	}
	return err
}

// finishedResults are the results of the open calls that finished while
// their batch ran on (run_calls.go), as one tool message, read in the
// bundle: an interrupt keeps them; FinishInterruption answers the other
// open calls as interrupted.
func finishedResults(ctx context.Context, tx *chatstate.Tx) ([]chatstate.NewMessage, error) {
	open, err := tx.OpenToolCalls(ctx)
	if err != nil || len(open) == 0 {
		return nil, err
	}
	ids := make([]int64, 0, 1)
	for _, c := range open {
		if !slices.Contains(ids, c.MessageID) {
			ids = append(ids, c.MessageID)
		}
	}
	rows, err := tx.Queries().ToolCallRunsOf(ctx, queries.ToolCallRunsOfParams{ChatID: tx.Chat().ID, MessageIds: ids})
	if err != nil {
		return nil, fmt.Errorf("read the runs of chat %s's open tool calls: %w", tx.Chat().ID, err)
	}
	done := map[startKey]callRun{}
	for _, row := range rows {
		if run := runOf(row); run.finished {
			done[startKey{row.MessageID, row.ToolCallID}] = run
		}
	}
	var results chatmsg.Content
	for _, c := range open {
		if run, ok := done[startKey{c.MessageID, c.ToolCallID}]; ok {
			results = append(results, chatmsg.ToolResult(c.ToolCallID, c.ToolName, run.result, run.isError))
		}
	}
	if len(results) == 0 {
		return nil, nil
	}
	return []chatstate.NewMessage{{Role: chatstate.RoleTool, Content: results}}, nil
}

// partialMessage builds the interrupted assistant message from an episode's
// streamed deltas: everything the watchers were shown, text, reasoning and
// tool calls, as parts in the order the model streamed them (deltas of one
// part joined), with the model call's runtime up to the interrupt. A tool
// call in it never ran: FinishInterruption answers it as interrupted. nil
// when nothing was streamed.
func partialMessage(parts []partbuf.Part, runtime time.Duration) []chatstate.NewMessage {
	var content chatmsg.Content
	at := map[int]int{} // streamed part index -> position in content
	for _, p := range parts {
		var d streamPart
		if err := json.Unmarshal(p.Data, &d); err != nil {
			continue
		}
		switch d.Type {
		case chatmsg.PartText, chatmsg.PartReasoning:
			if i, ok := at[d.Index]; ok && content[i].Type == d.Type {
				content[i].Text += d.Text
				continue
			}
			if d.Text == "" {
				continue
			}
		case chatmsg.PartToolCall:
			if d.ToolCallID == "" || d.ToolName == "" {
				continue
			}
		default:
			continue
		}
		at[d.Index] = len(content)
		content = append(content, d.Part)
	}
	if len(content) == 0 {
		return nil
	}
	// Its tokens are unknown: the stored usage holds the runtime only, so
	// compaction reads no usage from it.
	usage := json.RawMessage(fmt.Sprintf(`{"runtime_ms":%d}`, runtime.Milliseconds()))
	return []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: content, Usage: usage}}
}

// actionTimeout is the dynamic tools timeout goroutine: it waits for the
// chat's requires_action_deadline_at, then applies CancelRequiresAction.
func (r *runner) actionTimeout(ctx context.Context, in intent) error {
	// The deadline is on the bundles' clock (Postgres's): what is left of
	// it is measured against the same clock, then waited out on the
	// runner's, so a worker whose clock is off cancels neither early nor
	// late.
	var left time.Duration
	var hasDeadline bool
	if err := r.view(ctx, in, func(tx *chatstate.Tx) error {
		if d := tx.Chat().RequiresActionDeadlineAt; d != nil {
			left, hasDeadline = d.Sub(tx.Now()), true
		}
		return nil
	}); err != nil {
		return err
	}
	if hasDeadline && !sleep(ctx, r.clock, left) {
		return ctx.Err()
	}
	_, err := r.update(ctx, in, func(tx *chatstate.Tx) error {
		return tx.CancelRequiresAction(ctx, chatstate.ReasonRequiresActionTimeout)
	})
	return err
}

// abandon is the abandon chat goroutine: it releases ownership while the
// chat is still this runner's, then asks the manager to clean the runner up.
func (r *runner) abandon(ctx context.Context, in intent) error {
	if _, err := r.deps.Machine.Update(ctx, r.spec.ChatID, func(tx *chatstate.Tx) error {
		if err := tx.CheckFence(in.fence()); err != nil {
			return err
		}
		return tx.Abandon(ctx)
	}); err != nil {
		return err
	}
	r.requestCleanup()
	return nil
}
