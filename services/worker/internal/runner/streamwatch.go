package runner

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/pkg/llm"
)

// ttftError is the cause of a call cancelled because no event arrived
// within the first-token timeout.
type ttftError struct{ timeout time.Duration }

func (e *ttftError) Error() string {
	return fmt.Sprintf("the model sent nothing within the first-token timeout of %s", e.timeout)
}

// idleError is the cause of a call cancelled because its stream went
// silent for the idle timeout after an event.
type idleError struct{ timeout time.Duration }

func (e *idleError) Error() string {
	return fmt.Sprintf("the model's stream sent nothing for the idle timeout of %s", e.timeout)
}

// streamWatch bounds the silences of one model call on the runner's
// clock, so a stalled provider cannot hold a chat: the first event must
// arrive within the first-token timeout and each later one within the
// idle timeout of the one before (both retryable); the turn deadline, when
// set, ends the call whatever it is doing. A zero limit is off.
type streamWatch struct {
	ctx     context.Context // the call's context
	cancel  context.CancelCauseFunc
	clock   clockwork.Clock
	idleFor time.Duration
	started atomic.Bool
	idle    clockwork.Timer // armed by the first event
	timers  []clockwork.Timer
}

// watchStream starts the watch of a call made with the returned watch's
// ctx. The caller reports every event with event and ends with stop.
func (r *runner) watchStream(ctx context.Context, turnDeadline time.Time) *streamWatch {
	cctx, cancel := context.WithCancelCause(ctx)
	w := &streamWatch{ctx: cctx, cancel: cancel, clock: r.clock, idleFor: r.cfg.StreamIdleTimeout}
	if d := r.cfg.TTFTTimeout; d > 0 {
		w.timers = append(w.timers, r.clock.AfterFunc(d, func() {
			if !w.started.Load() {
				cancel(&ttftError{timeout: d})
			}
		}))
	}
	if !turnDeadline.IsZero() {
		w.timers = append(w.timers, r.clock.AfterFunc(turnDeadline.Sub(r.clock.Now()), func() { cancel(errTurnLimit) }))
	}
	return w
}

// event records that the stream sent something: the first-token window
// closes and the idle timeout starts over.
func (w *streamWatch) event() {
	w.started.Store(true)
	if w.idleFor <= 0 {
		return
	}
	if w.idle == nil {
		d := w.idleFor
		w.idle = w.clock.AfterFunc(d, func() { w.cancel(&idleError{timeout: d}) })
		return
	}
	w.idle.Reset(w.idleFor)
}

// err is the outcome of a call that failed with callErr while ctx (the
// caller's, not the watch's) is still live: a timeout of the watch is a
// retryable error naming it, the turn deadline errTurnLimit.
func (w *streamWatch) err(ctx context.Context, callErr error) error {
	if callErr == nil || ctx.Err() != nil {
		return callErr
	}
	var ttft *ttftError
	var idle *idleError
	switch cause := context.Cause(w.ctx); {
	case errors.As(cause, &ttft), errors.As(cause, &idle):
		return llm.NewRetryable(cause)
	case errors.Is(cause, errTurnLimit):
		return errTurnLimit
	}
	return callErr
}

// stop stops the watch's timers and releases its context.
func (w *streamWatch) stop() {
	for _, t := range w.timers {
		t.Stop()
	}
	if w.idle != nil {
		w.idle.Stop()
	}
	w.cancel(nil)
}
