package runner

import (
	"context"
	"errors"
	"log/slog"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
)

// commit applies fn as one fenced bundle (update) and, when the database
// fails transiently (a reset or terminated connection, a timeout, a
// serialization failure or deadlock), applies it again with what is in
// hand: a model's response, the results of tools that already ran, a
// hook's answer. A failed commit never makes the runner call the model
// or run a tool again.
//
// It retries with bounded backoff on the runner's clock until the bundle
// commits, ctx ends, or the bundle is refused for good. The fence is what
// makes the retry safe: a COMMIT whose outcome was lost with the
// connection but which did apply moved the chat on (a new history version
// or status), so its retry is refused with ErrFenced, as is the retry of
// a runner whose lease another worker took over. what names the bundle
// in the logs.
func (r *runner) commit(ctx context.Context, in intent, what string, fn func(tx *chatstate.Tx) error) (chatstate.Result, error) {
	return r.commitThen(ctx, in, what, fn, nil)
}

// commitThen is commit, calling committed (when not nil) with the result
// once the bundle committed, before the runner's loop hears of it.
func (r *runner) commitThen(ctx context.Context, in intent, what string, fn func(tx *chatstate.Tx) error, committed func(chatstate.Result)) (chatstate.Result, error) {
	for failures := 0; ; failures++ {
		res, err := r.updateThen(ctx, in, fn, committed)
		if err == nil || ctx.Err() != nil || !transientDBError(err) {
			return res, err
		}
		d := backoff(r.cfg.RetryBaseDelay, r.cfg.RetryMaxDelay, failures)
		r.log.Warn("commit failed; retrying it with the same result",
			slog.String("bundle", what), slog.String("error", err.Error()),
			slog.Int("failures", failures+1), slog.Duration("backoff", d))
		if !sleep(ctx, r.clock, d) {
			return chatstate.Result{}, ctx.Err()
		}
	}
}

// transientDBError reports whether err is a database failure that the
// same bundle may not meet again: a lost connection or one the server
// closed, a timeout (lock_timeout, statement_timeout, a deadline of the
// driver), a serialization failure or deadlock, a server starting,
// stopping or out of connections, a read-only server after a failover.
// The state machine's own refusals (fenced, not found, not allowed) and
// other SQL errors are permanent: repeating the bundle would repeat them.
func transientDBError(err error) bool {
	for _, permanent := range []error{
		chatstate.ErrFenced, chatstate.ErrChatNotFound, chatstate.ErrNotAllowed, chatstate.ErrInvalidArgument,
		chatstate.ErrMessageNotFound, chatstate.ErrLandingMismatch, chatstate.ErrFamilyArchived,
	} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	return dbpool.Transient(err)
}
