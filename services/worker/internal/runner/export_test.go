package runner

import (
	"context"

	"github.com/chatd/chatd/pkg/chatstate"
)

// CommitStepAs applies step the way r's generation goroutine for
// (historyVersion, status) commits one: under its fence, retrying
// transient database failures.
func CommitStepAs(ctx context.Context, r Runner, historyVersion int64, status chatstate.Status, step chatstate.Step) error {
	rr := r.(*runner)
	return rr.commitStep(ctx, generationIntent(rr, historyVersion, status), step)
}

// FinishTurnAs applies FinishTurn the way r's generation goroutine for
// (historyVersion, status) finishes a turn.
func FinishTurnAs(ctx context.Context, r Runner, historyVersion int64, status chatstate.Status) error {
	rr := r.(*runner)
	_, err := rr.commit(ctx, generationIntent(rr, historyVersion, status), "finish_turn", func(tx *chatstate.Tx) error {
		_, err := tx.FinishTurn(ctx)
		return err
	})
	return err
}

func generationIntent(r *runner, historyVersion int64, status chatstate.Status) intent {
	return intent{Kind: kindGeneration, HistoryVersion: historyVersion, Status: status, RunnerID: r.spec.RunnerID}
}
