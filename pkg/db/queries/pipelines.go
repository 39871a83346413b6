package queries

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Pipeline runs several statements in one round trip on q's connection
// (pgx's batch): each call makes exactly one call of a generated method on
// the Queries it is given and keeps the result. The statements stay
// separate and run one after the other, each taking its own snapshot under
// READ COMMITTED; only the waits between them on the network are gone. On
// the way to a turn's first part every round trip costs a few hundred
// microseconds on a busy machine, and the bundles there read several
// independent things.
//
// A call runs twice: once against a recorder, which takes its statement and
// arguments (the generated method sees an error and the call must ignore
// what it returned), then against the batch's result, which it scans with
// the generated code. So the calls must do nothing but the one method call
// and the assignment of its results. A Queries whose connection cannot
// pipeline runs each call once, directly. The error is the batch's: a
// statement that failed fails its call's own result too, and the
// statements after it (the server skips them).
func (q *Queries) Pipeline(ctx context.Context, calls ...func(*Queries)) error {
	batcher, ok := q.db.(interface {
		SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	})
	if !ok {
		for _, call := range calls {
			call(q)
		}
		return nil
	}
	b, err := record(calls)
	if err != nil {
		return err
	}
	br := batcher.SendBatch(ctx, b)
	replay(br, calls)
	return br.Close()
}

// CommitPipeline runs calls as Pipeline does and commits tx in the same
// round trip: the statements and the COMMIT go as one batch, for a
// bundle's last writes, whose results are read only once the commit has
// landed. A statement that fails makes the server skip the rest and the
// COMMIT, so the transaction rolls back; its error is the call's own and
// the one returned. tx must be dbpool.BeginPipelined's, which can commit
// with a batch, and is ended whatever happens.
func CommitPipeline(ctx context.Context, tx pgx.Tx, calls ...func(*Queries)) error {
	committer, ok := tx.(interface {
		CommitBatch(context.Context, *pgx.Batch, func(pgx.BatchResults)) error
	})
	b, err := record(calls)
	switch {
	case !ok:
		err = fmt.Errorf("commit with a pipeline: a %T cannot send its COMMIT in a batch", tx)
	case err == nil:
		return committer.CommitBatch(ctx, b, func(br pgx.BatchResults) { replay(br, calls) })
	}
	_ = tx.Rollback(ctx) // nothing was sent; the transaction must not stay open holding its locks
	return err
}

// record runs each call against a recorder and queues its one statement.
func record(calls []func(*Queries)) (*pgx.Batch, error) {
	rec := &recorder{}
	b := &pgx.Batch{}
	for i, call := range calls {
		call(&Queries{db: rec})
		if len(rec.statements) != i+1 {
			return nil, fmt.Errorf("pipeline call %d made %d statements, want one", i, len(rec.statements)-i)
		}
		s := rec.statements[i]
		b.Queue(s.sql, s.args...)
	}
	return b, nil
}

// replay runs each call again against the batch's results, which it scans
// with the generated code.
func replay(br pgx.BatchResults, calls []func(*Queries)) {
	results := &Queries{db: batchResults{br}}
	for _, call := range calls {
		call(results)
	}
}

// errRecorded is what a recorded statement returns: it did not run.
var errRecorded = errors.New("statement recorded for a pipeline, not run")

type statement struct {
	sql  string
	args []any
}

// recorder is a DBTX that keeps each statement instead of running it.
type recorder struct{ statements []statement }

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.statements = append(r.statements, statement{sql, args})
	return pgconn.CommandTag{}, errRecorded
}

func (r *recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.statements = append(r.statements, statement{sql, args})
	return nil, errRecorded
}

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.statements = append(r.statements, statement{sql, args})
	return recordedRow{}
}

type recordedRow struct{}

func (recordedRow) Scan(...any) error { return errRecorded }

// batchResults is a DBTX answering each statement with the batch's next
// result, in the order they were queued.
type batchResults struct{ br pgx.BatchResults }

func (b batchResults) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return b.br.Exec()
}

func (b batchResults) Query(context.Context, string, ...any) (pgx.Rows, error) { return b.br.Query() }

func (b batchResults) QueryRow(context.Context, string, ...any) pgx.Row { return b.br.QueryRow() }

// BundleOpening is what a transition bundle's first round trip reads.
type BundleOpening struct {
	// ReadOpenToolCalls asks for OpenToolCalls too.
	ReadOpenToolCalls bool
	// ReadMessages asks for Messages: the active history
	// (ChatMessageListActive), or with MessagesSince set the rows changed
	// after that history version (ChatMessageListChangedSince).
	ReadMessages  bool
	MessagesSince *int64
	// ReserveMessageID asks for MessageID: the next message ID, taken
	// with the lock (ChatMessageReserveID).
	ReserveMessageID bool

	// Reads are more calls for the same round trip, after the others
	// (Pipeline's rules): what the caller reads about the chat it locks.
	Reads []func(*Queries)

	Chat          Chat // locked, its snapshot_version advanced
	Queue         ChatQueueLenAndNowRow
	OpenToolCalls []ChatMessageOpenToolCallsRow
	Messages      []ChatMessage
	MessageID     int64
}

// OpenBundle opens a transition bundle in one round trip (Pipeline):
// ChatLockAndBump, ChatQueueLenAndNow and what o asks for (open tool
// calls, messages). The reads run after the lock is granted, so they see
// what every bundle before this one committed (the reason
// ChatQueueLenAndNow is a statement of its own). Every bundle on the way
// to a turn's first part opens with it. A chat that does not exist is
// pgx.ErrNoRows.
func OpenBundle(ctx context.Context, tx pgx.Tx, id uuid.UUID, o *BundleOpening) error {
	var lockErr, queueErr, openErr, msgsErr, idErr error
	calls := []func(*Queries){
		func(q *Queries) { o.Chat, lockErr = q.ChatLockAndBump(ctx, id) },
		func(q *Queries) { o.Queue, queueErr = q.ChatQueueLenAndNow(ctx, id) },
	}
	if o.ReadOpenToolCalls {
		calls = append(calls, func(q *Queries) { o.OpenToolCalls, openErr = q.ChatMessageOpenToolCalls(ctx, id) })
	}
	switch {
	case o.ReadMessages && o.MessagesSince != nil:
		since := *o.MessagesSince
		calls = append(calls, func(q *Queries) {
			o.Messages, msgsErr = q.ChatMessageListChangedSince(ctx, ChatMessageListChangedSinceParams{ChatID: id, Since: since})
		})
	case o.ReadMessages:
		calls = append(calls, func(q *Queries) { o.Messages, msgsErr = q.ChatMessageListActive(ctx, id) })
	}
	if o.ReserveMessageID {
		calls = append(calls, func(q *Queries) { o.MessageID, idErr = q.ChatMessageReserveID(ctx) })
	}
	err := New(tx).Pipeline(ctx, append(calls, o.Reads...)...)
	switch {
	case lockErr != nil:
		return lockErr // pgx.ErrNoRows for a missing chat
	case queueErr != nil:
		return fmt.Errorf("count queue: %w", queueErr)
	case openErr != nil:
		return fmt.Errorf("find open tool calls: %w", openErr)
	case msgsErr != nil:
		return fmt.Errorf("list messages: %w", msgsErr)
	case idErr != nil:
		return fmt.Errorf("reserve a message id: %w", idErr)
	case err != nil:
		return fmt.Errorf("read with the lock: %w", err) // one of o.Reads
	}
	return nil
}

// ChatMessageInsertAndSetExecution inserts a message and rewrites the
// chat's execution state in one round trip (Pipeline), for a transition
// that does both and needs nothing from the first to send the second (a
// user message starting a turn). The update runs after the insert, so the
// chat row it returns carries the history_version the message trigger set.
func (q *Queries) ChatMessageInsertAndSetExecution(ctx context.Context, ins ChatMessageInsertParams, exec ChatSetExecutionParams) (ChatMessage, Chat, error) {
	var msg ChatMessage
	var chat Chat
	var insErr, execErr error
	err := q.Pipeline(ctx,
		func(q *Queries) { msg, insErr = q.ChatMessageInsert(ctx, ins) },
		func(q *Queries) { chat, execErr = q.ChatSetExecution(ctx, exec) },
	)
	switch {
	case insErr != nil:
		return msg, chat, fmt.Errorf("insert message: %w", insErr)
	case execErr != nil:
		return msg, chat, fmt.Errorf("write execution state: %w", execErr)
	}
	return msg, chat, err
}
