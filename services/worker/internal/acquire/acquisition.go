package acquire

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// errSkip rolls back an acquisition whose chat no longer qualifies.
var errSkip = errors.New("chat no longer needs an owner")

// errFirstStep rolls back an acquisition whose bundled first step failed.
var errFirstStep = errors.New("the first step failed")

// TryAcquire acquires chat id if, under its row lock, it is still runnable
// and unowned or owned by a stale lease, and admission finds it a slot;
// then it asks the manager to run it. It reports whether it acquired the
// chat; ErrNoCapacity means admission refused it and it stays unowned.
func (l *Loop) TryAcquire(ctx context.Context, id uuid.UUID) (acquired bool, err error) {
	defer func() {
		switch {
		case acquired:
			// takenOver is final once acquired.
		case errors.Is(err, ErrNoCapacity):
			l.metrics.count(ResultNoCapacity)
		case err != nil && ctx.Err() == nil:
			l.metrics.count(ResultError)
		}
	}()
	a := &acquisition{l: l, id: id, runnerID: uuid.New()}
	a.stepper, a.bundleFirst = l.spawner.(FirstStepper)
	err = a.commit(ctx)
	if errors.Is(err, errSkip) || errors.Is(err, chatstate.ErrChatNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := a.spawn(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// acquisition is one TryAcquire of a chat: what its bundle decides under
// the chat's lock.
type acquisition struct {
	l        *Loop
	id       uuid.UUID
	runnerID uuid.UUID
	adm      admission
	// takenOver: the chat had an owner whose lease had gone stale.
	takenOver bool
	stepper   FirstStepper
	// bundleFirst: the runner's first step is decided in the bundle too.
	bundleFirst bool
	stepReads   *modelconfig.ChatStepReads // read with the lock when bundleFirst
	first       *runner.FirstStep
}

// commit runs the acquisition bundle. When the bundled first step fails,
// not the acquisition, it acquires alone and lets the runner decide the
// step (and meet the failure) itself.
func (a *acquisition) commit(ctx context.Context) error {
	bundle := func(tx *chatstate.Tx) error { return a.acquire(ctx, tx) }
	_, err := a.l.machine.Update(ctx, a.id, bundle, a.options(ctx)...)
	if errors.Is(err, errFirstStep) && ctx.Err() == nil {
		a.l.cfg.Log.Warn("decide the first step in the acquisition bundle", "chat_id", a.id.String(), "error", err.Error())
		a.bundleFirst, a.first = false, nil
		_, err = a.l.machine.Update(ctx, a.id, bundle, a.options(ctx)...)
	}
	return err
}

// options are the reads the bundle takes with the chat's lock: the
// limiter's count, and the first step's inputs when it is bundled.
func (a *acquisition) options(ctx context.Context) []chatstate.BundleOption {
	var opts []chatstate.BundleOption
	if !a.l.cfg.Limits.Unlimited() {
		opts = a.adm.reads(ctx, a.l.cfg.LockTimeout, a.l.cfg.Lease)
	}
	if a.bundleFirst {
		// The first step's decision reads the history before anything
		// writes it, and the chat's model configuration: read them with
		// the lock.
		opts = append(opts, chatstate.WithActiveMessages())
		var calls []func(*queries.Queries)
		a.stepReads, calls = runner.FirstStepReads(ctx, a.id)
		for _, call := range calls {
			opts = append(opts, chatstate.WithRead(call))
		}
	}
	return opts
}

// acquire is the bundle: it skips a chat that is no longer runnable or
// whose owner's lease is fresh, admits it, acquires it and, when bundled,
// decides the runner's first step.
func (a *acquisition) acquire(ctx context.Context, tx *chatstate.Tx) error {
	if !tx.State().Runnable() {
		return errSkip
	}
	owned := tx.Chat().WorkerID != nil
	if err := a.skipFresh(ctx, tx); err != nil {
		return err
	}
	if err := a.admit(ctx, tx, owned); err != nil {
		return err
	}
	a.takenOver = owned
	if err := tx.Acquire(ctx, a.l.cfg.WorkerID, a.runnerID); err != nil {
		return err
	}
	if !a.bundleFirst {
		return nil
	}
	var err error
	a.first, err = a.stepper.FirstStep(ctx, tx, runner.Spec{ChatID: a.id, WorkerID: a.l.cfg.WorkerID, RunnerID: a.runnerID, TakenOver: owned, StepReads: a.stepReads})
	if err != nil {
		return fmt.Errorf("%w: %w", errFirstStep, err)
	}
	return nil
}

// skipFresh returns errSkip when the chat has a runner whose lease is
// still fresh.
func (a *acquisition) skipFresh(ctx context.Context, tx *chatstate.Tx) error {
	c := tx.Chat()
	if c.WorkerID == nil || c.RunnerID == nil {
		return nil
	}
	fresh, err := a.l.fresh(ctx, tx.Queries(), c.ID, *c.RunnerID)
	if err != nil {
		return err
	}
	if fresh {
		return errSkip
	}
	return nil
}

// admit finds the chat a slot under the concurrent agent limits.
func (a *acquisition) admit(ctx context.Context, tx *chatstate.Tx, owned bool) error {
	limits, subagent := a.l.cfg.Limits, tx.Chat().ParentChatID != nil
	switch {
	case !owned && limits.limit(subagent) > 0:
		// The usual case: the lock and the count came with the chat's
		// lock (admission.reads).
		return a.adm.admit(limits, subagent)
	case owned || !limits.Unlimited():
		// A takeover checks the lease between the lock and the count.
		// With limits set the opening took the limiter lock already;
		// taking it again is harmless (advisory locks stack).
		q := tx.Queries()
		if err := LockLimiter(ctx, q, a.l.cfg.LockTimeout); err != nil {
			return err
		}
		// A renewal that committed while we waited for the lock may
		// have extended the lease: a takeover rechecks it.
		if owned {
			if err := a.skipFresh(ctx, tx); err != nil {
				return err
			}
		}
		return admit(ctx, q, limits, subagent, a.l.cfg.Lease)
	}
	return nil
}

// spawn asks the manager to run the acquired chat. When it cannot, no
// runner will heartbeat the chat: it is handed back at once rather than
// after the lease.
func (a *acquisition) spawn(ctx context.Context) error {
	spec := runner.Spec{ChatID: a.id, WorkerID: a.l.cfg.WorkerID, RunnerID: a.runnerID, TakenOver: a.takenOver, First: a.first}
	timeline.Mark("worker.spawn")
	if err := a.l.spawner.Spawn(ctx, spec); err != nil {
		a.l.abandon(a.id, a.runnerID)
		return fmt.Errorf("error spawning a runner for chat %s: %w", a.id, err)
	}
	if a.takenOver {
		a.l.metrics.count(ResultTakenOver)
	} else {
		a.l.metrics.count(ResultAcquired)
	}
	return nil
}

func (l *Loop) fresh(ctx context.Context, q *queries.Queries, chatID, runnerID uuid.UUID) (bool, error) {
	fresh, err := q.ChatHeartbeatIsFresh(ctx, queries.ChatHeartbeatIsFreshParams{
		ChatID: chatID, RunnerID: runnerID, LeaseSeconds: l.cfg.Lease.Seconds(),
	})
	if err != nil {
		return false, fmt.Errorf("error reading the lease of chat %s: %w", chatID, err)
	}
	return fresh, nil
}

func (l *Loop) abandon(chatID, runnerID uuid.UUID) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if _, err := Abandon(ctx, l.machine, chatID, l.cfg.WorkerID, runnerID); err != nil {
		l.cfg.Log.Warn("abandon chat without a runner", "chat_id", chatID.String(), "error", err.Error())
	}
}

// Abandon releases chat chatID if (workerID, runnerID) still owns it: the
// Abandon transition fenced on the runner ID. It reports whether it
// released the chat; a chat that moved on to another owner or was deleted
// is no error.
func Abandon(ctx context.Context, m *chatstate.Machine, chatID, workerID, runnerID uuid.UUID) (bool, error) {
	_, err := m.Update(ctx, chatID, func(tx *chatstate.Tx) error {
		c := tx.Chat()
		if c.WorkerID == nil || *c.WorkerID != workerID || c.RunnerID == nil || *c.RunnerID != runnerID {
			return errSkip
		}
		return tx.Abandon(ctx)
	})
	if errors.Is(err, errSkip) || errors.Is(err, chatstate.ErrChatNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("error abandoning chat %s: %w", chatID, err)
	}
	return true, nil
}
