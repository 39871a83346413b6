package openaiapi

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"

	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/notify"
)

// The journal of a response's stream is the table openai_response_events:
// its events, numbered from 0, in the order every client gets them. A
// stream appends what it computed before it writes anything, in one
// statement that succeeds only at the journal's end (the primary key
// refuses a sequence number another stream took first) and only while the
// chat is still at the version the events were computed from (the
// statement's FOR SHARE on the chat row orders the append with the chat's
// transitions). A stream that loses either race reads the journal (or the
// chat) again and computes anew; whatever it then writes comes from the
// journal. So numbering is decided once, by whichever stream sees an event
// first, and a replay reads it back.

var (
	// errSeqTaken: another stream appended at these sequence numbers first.
	errSeqTaken = errors.New("another stream appended these events first")
	// errChatMoved: the chat changed after the stream read it.
	errChatMoved = errors.New("the chat changed since the stream read it")
)

// maxSyncRounds bounds how often one sync computes anew after losing a
// race; past it the stream waits for its next wake-up.
const maxSyncRounds = 8

// responseStream is one client's stream of a response: the journal as far
// as it has read it, the stored state it read last, and the live parts of
// the model attempt running the turn.
type responseStream struct {
	h    *Handler
	rec  queries.OpenaiResponse
	fold foldState
	// pending are the journal's events from sequence number pendingFrom
	// not yet written to the client.
	pending     []streamEvent
	pendingFrom int
	snap        *snapshot
	feed        *liveFeed
	// notified receives a value when a notification says the chat moved
	// past basis.
	notified chan struct{}
	basis    atomic.Int64
	sub      *nats.Subscription
}

// snapshot is the stored state a plan starts from: the chat row (its
// versions name the running episode) and the turn, read at the same chat
// version.
type snapshot struct {
	chat queries.Chat
	turn turn
}

// openStream starts following the response's chat: its notifications (a
// hint: the stream also polls) and, with a relay, its live parts.
func (h *Handler) openStream(rec queries.OpenaiResponse) *responseStream {
	s := &responseStream{h: h, rec: rec, notified: make(chan struct{}, 1)}
	if h.Relay != nil {
		s.feed = newLiveFeed(h.Relay, rec.ChatID.String())
	}
	if h.Notify != nil {
		sub, err := notify.SubscribeUpdates(h.Notify, rec.ChatID, func(n *chatdv1.ChatUpdateNotification) {
			if n.GetSnapshotVersion() > s.basis.Load() {
				select {
				case s.notified <- struct{}{}:
				default:
				}
			}
		})
		if err != nil {
			h.log().Warn("openai stream: subscribe to chat updates; polling only", "chat", rec.ChatID, "error", err)
		} else {
			s.sub = sub
			// The subscription must be in place before the first read, or a
			// change between the two would wait for the poll.
			_ = h.Notify.FlushTimeout(notify.FlushTimeout)
		}
	}
	return s
}

func (s *responseStream) close() {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	s.feed.close()
}

// sync brings the journal up to date with what is known now: the journal
// as other streams left it, the stored state (read again when reread), and
// the live parts. The journal's new events are then pending.
func (s *responseStream) sync(ctx context.Context, reread bool) error {
	for range maxSyncRounds {
		if reread || s.snap == nil {
			if err := s.readSnapshot(ctx); err != nil {
				return err
			}
			reread = false
		}
		if err := s.readJournal(ctx); err != nil {
			return err
		}
		if s.fold.final {
			return nil
		}
		tg, err := s.target()
		if err != nil {
			return err
		}
		evs := plan(&s.fold, tg)
		if len(evs) == 0 {
			return nil
		}
		switch err := s.append(ctx, evs); {
		case err == nil:
			return nil
		case errors.Is(err, errChatMoved):
			reread = true
		case !errors.Is(err, errSeqTaken):
			return err
		}
	}
	return nil
}

// readSnapshot reads the chat row, the response record (a cancel changes
// it) and the turn, and checks that the chat did not move meanwhile (it
// tries again a few times; an inconsistent read only makes the next append
// fail, since its basis is the first read's version).
func (s *responseStream) readSnapshot(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		before, err := s.h.Q.ChatGet(ctx, s.rec.ChatID)
		if err != nil {
			return s.gone(err)
		}
		rec, err := s.h.Q.OpenAIResponseGet(ctx, s.rec.ID)
		if err != nil {
			return s.gone(err)
		}
		t, err := s.h.loadTurn(ctx, rec)
		if err != nil {
			return err
		}
		after, err := s.h.Q.ChatGet(ctx, s.rec.ChatID)
		if err != nil {
			return s.gone(err)
		}
		if before.SnapshotVersion == after.SnapshotVersion || attempt >= 3 {
			s.rec, s.snap = rec, &snapshot{chat: before, turn: t}
			s.basis.Store(before.SnapshotVersion)
			return nil
		}
		if err := sleepCtx(ctx, time.Duration(5<<attempt)*time.Millisecond); err != nil {
			return err
		}
	}
}

// gone words a response (or chat) deleted under the stream as its 404.
func (s *responseStream) gone(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("response", formatID(responsePrefix, s.rec.ID))
	}
	return err
}

// readJournal takes the events other streams appended since the last read.
func (s *responseStream) readJournal(ctx context.Context) error {
	rows, err := s.h.Q.OpenAIResponseEvents(ctx, queries.OpenAIResponseEventsParams{ResponseID: s.rec.ID, FromSeq: int32(s.fold.n)})
	if err != nil {
		return err
	}
	for _, r := range rows {
		if int(r.Seq) != s.fold.n {
			return fmt.Errorf("the journal of response %s has event %d where %d belongs", s.rec.ID, r.Seq, s.fold.n)
		}
		if err := s.take(streamEvent{Type: r.Type, Data: r.Data}); err != nil {
			return err
		}
	}
	return nil
}

// take applies the journal's next event and holds it for the client.
func (s *responseStream) take(e streamEvent) error {
	if err := s.fold.apply(e); err != nil {
		return fmt.Errorf("the journal of response %s: %w", s.rec.ID, err)
	}
	s.pending = append(s.pending, e)
	return nil
}

// append adds evs at the journal's end; errSeqTaken or errChatMoved when
// the race is lost.
func (s *responseStream) append(ctx context.Context, evs []streamEvent) error {
	types, datas := make([]string, len(evs)), make([]string, len(evs))
	for i, e := range evs {
		types[i], datas[i] = e.Type, string(e.Data)
	}
	n, err := s.h.Q.OpenAIResponseEventsAppend(ctx, queries.OpenAIResponseEventsAppendParams{
		ResponseID: s.rec.ID, FirstSeq: int32(s.fold.n), Types: types, Datas: datas,
		ChatID: s.rec.ChatID, Basis: s.snap.chat.SnapshotVersion,
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		return errSeqTaken
	case errors.As(err, &pgErr) && pgErr.Code == "23503": // foreign_key_violation: the response was deleted
		return notFound("response", formatID(responsePrefix, s.rec.ID))
	case err != nil:
		return err
	case n == 0:
		return errChatMoved
	case int(n) != len(evs):
		return fmt.Errorf("appended %d of %d events", n, len(evs))
	}
	for _, e := range evs {
		if err := s.take(e); err != nil {
			return err
		}
	}
	return nil
}

// target is what the stream knows now: the stored turn and, while the turn
// runs, its episode's live parts (the feed is pointed at that episode
// here).
func (s *responseStream) target() (target, error) {
	t := s.snap.turn
	status := t.status()
	view := t.view()
	respHex := hex.EncodeToString(s.rec.ID[:])
	tg := target{
		background: s.rec.Background, queued: t.queued, terminal: terminal(status), status: status,
		skeleton: t.skeleton,
		liveID: func(kind string, n int) string {
			prefix := "msg"
			if kind == kindReasoning {
				prefix = "rs"
			}
			return fmt.Sprintf("%s_%s_%d", prefix, respHex, n)
		},
	}
	if tg.terminal {
		tg.response = view
	}
	for _, item := range view.Output {
		ti, err := storedTarget(item)
		if err != nil {
			return target{}, err
		}
		tg.items = append(tg.items, ti)
	}
	ep := s.snap.episode()
	if tg.terminal || t.queued || t.ended || endsWithCall(tg.items) {
		// The running attempt, if any, is not this response's: a response
		// that ends with function calls ends before the next model step.
		ep = episode{}
	}
	s.feed.follow(ep)
	if ep.worker != "" {
		tg.items = append(tg.items, s.feed.items(ep)...)
	}
	return tg, nil
}

// endsWithCall reports whether the stored output ends with a function
// call.
func endsWithCall(items []targetItem) bool {
	return len(items) > 0 && items[len(items)-1].kind == kindFunctionCall
}

// episode is the model attempt the chat runs now, whose output is not
// committed yet (none when it runs nothing).
func (sn *snapshot) episode() episode {
	c := sn.chat
	running := c.Status == queries.ChatStatusRunning || c.Status == queries.ChatStatusInterrupting
	if !running || c.WorkerID == nil || c.GenerationAttempt < 1 {
		return episode{}
	}
	return episode{worker: c.WorkerID.String(), history: c.HistoryVersion, attempt: c.GenerationAttempt}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
