package autoarchive_test

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/worker/internal/autoarchive"
)

// How the worker runs the loop: one per worker process, beside its other
// loops. Several workers may run it at once: the family transaction makes a
// second archive of the same family a skip. Not run: it only has to
// compile.
func Example_wiring() {
	var (
		ctx     context.Context    // the worker's run context
		pool    *pgxpool.Pool      // the worker's pool
		machine *chatstate.Machine // with AfterCommit publishing chat:update
		log     *slog.Logger
		days    int // CHATD_AUTO_ARCHIVE_DAYS; 0 disables
	)
	loop := autoarchive.New(pool, machine, autoarchive.Config{Days: days, Logger: log})
	go func() { _ = loop.Run(ctx) }() // returns when ctx ends, at once if disabled
}
