package autoarchive_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/autoarchive"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const days = 7

type fixture struct {
	t       *testing.T
	ctx     context.Context
	pool    *pgxpool.Pool
	machine *chatstate.Machine
	clock   *clockwork.FakeClock
	org     uuid.UUID
	user    uuid.UUID
	// old is an instant well before the cutoff of clock's now.
	old time.Time
}

func setup(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	pool := dbtest.NewPool(t)
	e := &fixture{
		t: t, ctx: ctx, pool: pool,
		machine: chatstate.New(pool, chatstate.Config{}),
		clock:   clockwork.NewFakeClockAt(time.Now()),
		org:     uuid.New(), user: uuid.New(),
	}
	e.old = e.clock.Now().AddDate(0, 0, -30)
	q := queries.New(pool)
	require.NoError(t, q.OrganizationEnsure(ctx, queries.OrganizationEnsureParams{ID: e.org, Name: "org"}))
	require.NoError(t, q.UserEnsure(ctx, queries.UserEnsureParams{ID: e.user, Name: "user"}))
	require.NoError(t, q.OrganizationMemberEnsure(ctx, queries.OrganizationMemberEnsureParams{OrganizationID: e.org, UserID: e.user}))
	return e
}

func (e *fixture) loop(cfg autoarchive.Config) *autoarchive.Loop {
	if cfg.Days == 0 {
		cfg.Days = days
	}
	cfg.Clock = e.clock
	return autoarchive.New(e.pool, e.machine, cfg)
}

func assistant(s string) chatstate.NewMessage {
	return chatstate.NewMessage{Role: chatstate.RoleAssistant, Content: chatmsg.Content{chatmsg.Text(s)}}
}

// create makes a chat: waiting, with one assistant message, or running when
// user is set (a user message starts a turn). parent makes it a child.
func (e *fixture) create(parent *uuid.UUID, user bool) uuid.UUID {
	e.t.Helper()
	msg := assistant("hello")
	if user {
		msg = chatstate.UserMessage(chatmsg.Content{chatmsg.Text("hi")})
	}
	id := uuid.New()
	_, err := e.machine.Create(e.ctx, chatstate.CreateParams{
		ID: id, OrganizationID: e.org, OwnerID: e.user, ParentChatID: parent,
		Title: "chat", Messages: []chatstate.NewMessage{msg},
	})
	require.NoError(e.t, err)
	return id
}

// fail parks a running chat in error (E0).
func (e *fixture) fail(id uuid.UUID) {
	e.t.Helper()
	_, err := e.machine.Update(e.ctx, id, func(tx *chatstate.Tx) error { return tx.FinishError(e.ctx, "boom") })
	require.NoError(e.t, err)
}

// backdateChats sets created_at and updated_at of the chats to at.
func (e *fixture) backdateChats(at time.Time, ids ...uuid.UUID) {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, `UPDATE chats SET created_at = $2, updated_at = $2 WHERE id = ANY($1)`, ids, at)
	require.NoError(e.t, err)
}

// backdateMessages sets created_at of the chats' messages to at.
func (e *fixture) backdateMessages(at time.Time, ids ...uuid.UUID) {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, `UPDATE chat_messages SET created_at = $2 WHERE chat_id = ANY($1)`, ids, at)
	require.NoError(e.t, err)
}

// backdate makes the chats and their messages old.
func (e *fixture) backdate(ids ...uuid.UUID) {
	e.t.Helper()
	e.backdateChats(e.old, ids...)
	e.backdateMessages(e.old, ids...)
}

func (e *fixture) archived(id uuid.UUID) bool {
	e.t.Helper()
	s, err := e.machine.Get(e.ctx, id)
	require.NoError(e.t, err)
	return s.Chat.Archived
}

func (e *fixture) requireArchived(want bool, ids ...uuid.UUID) {
	e.t.Helper()
	for _, id := range ids {
		require.Equal(e.t, want, e.archived(id), "chat %s archived", id)
	}
}

func (e *fixture) state(id uuid.UUID) chatstate.State {
	e.t.Helper()
	s, err := e.machine.Get(e.ctx, id)
	require.NoError(e.t, err)
	return s.State()
}

func TestCutoff(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 14, 30, 5, 7, time.UTC)
	require.Equal(t, time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), autoarchive.Cutoff(at, 7))
	require.Equal(t, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), autoarchive.Cutoff(at, 0))
	// The day is the UTC day, whatever the clock's zone.
	tokyo := time.FixedZone("JST", 9*3600)
	require.Equal(t, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC),
		autoarchive.Cutoff(time.Date(2026, 11, 30, 8, 0, 0, 0, tokyo), 1))
}

func TestTickArchivesIdleFamilies(t *testing.T) {
	t.Parallel()
	e := setup(t)

	// Idle: a waiting root alone.
	lone := e.create(nil, false)
	e.backdate(lone)
	// Idle: a root in error with a waiting child and an errored grandchild.
	errRoot := e.create(nil, true)
	e.fail(errRoot)
	errChild := e.create(&errRoot, false)
	errGrandchild := e.create(&errChild, true)
	e.fail(errGrandchild)
	e.backdate(errRoot, errChild, errGrandchild)
	require.Equal(t, chatstate.E0, e.state(errRoot))

	// Recent: nothing backdated.
	recent := e.create(nil, false)
	// Only messages count as activity: a child whose row changed recently
	// but whose messages are old does not keep its family.
	busyRoot := e.create(nil, false)
	busyChild := e.create(&busyRoot, false)
	e.backdate(busyRoot)
	e.backdateMessages(e.old, busyChild)
	// A recent message keeps its family, however old the rows' updated_at.
	chattyRoot := e.create(nil, false)
	chattyChild := e.create(&chattyRoot, false)
	e.backdate(chattyRoot)
	e.backdateChats(e.old, chattyChild)
	// A running child keeps its family.
	runRoot := e.create(nil, false)
	runChild := e.create(&runRoot, true)
	e.backdate(runRoot, runChild)
	require.Equal(t, chatstate.R0, e.state(runChild))
	// A running root is no candidate.
	runningRoot := e.create(nil, true)
	e.backdate(runningRoot)
	// An archived root is no candidate.
	archivedRoot := e.create(nil, false)
	_, err := e.machine.SetFamilyArchived(e.ctx, archivedRoot, true)
	require.NoError(t, err)
	e.backdate(archivedRoot)
	// Children are never candidates themselves: an idle child of a recent
	// root stays as it is.
	youngRoot := e.create(nil, false)
	oldChild := e.create(&youngRoot, false)
	e.backdate(oldChild)

	stats, err := e.loop(autoarchive.Config{}).Tick(e.ctx)
	require.NoError(t, err)
	require.Equal(t, autoarchive.Cutoff(e.clock.Now(), days), stats.Cutoff)
	require.Equal(t, 3, stats.Candidates)
	require.Equal(t, 3, stats.Archived)
	require.Zero(t, stats.Skipped)
	require.Zero(t, stats.Failed)

	e.requireArchived(true, lone, errRoot, errChild, errGrandchild, busyRoot, busyChild)
	require.Equal(t, chatstate.XE0, e.state(errRoot))
	require.Equal(t, chatstate.XW, e.state(errChild))
	e.requireArchived(false, recent, chattyRoot, chattyChild,
		runRoot, runChild, runningRoot, youngRoot, oldChild)

	// The next tick finds nothing new.
	stats, err = e.loop(autoarchive.Config{}).Tick(e.ctx)
	require.NoError(t, err)
	require.Zero(t, stats.Candidates)
}

func TestTickCutoffBoundary(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cutoff := autoarchive.Cutoff(e.clock.Now(), days)
	before := e.create(nil, false)
	e.backdate(before)
	e.backdateChats(cutoff.Add(-time.Microsecond), before)
	at := e.create(nil, false)
	e.backdate(at)
	e.backdateChats(cutoff, at)

	stats, err := e.loop(autoarchive.Config{}).Tick(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Archived)
	e.requireArchived(true, before)
	e.requireArchived(false, at)

	// A longer setting keeps what a shorter one archives.
	young := e.create(nil, false)
	e.backdate(young)
	e.backdateChats(cutoff.AddDate(0, 0, -3), young)
	e.backdateMessages(cutoff.AddDate(0, 0, -3), young)
	stats, err = e.loop(autoarchive.Config{Days: days + 7}).Tick(e.ctx)
	require.NoError(t, err)
	require.Zero(t, stats.Candidates)
	e.requireArchived(false, young)
}

func TestTickBatches(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var ids []uuid.UUID
	for range 7 {
		id := e.create(nil, false)
		e.backdate(id)
		ids = append(ids, id)
	}
	stats, err := e.loop(autoarchive.Config{BatchSize: 2}).Tick(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 7, stats.Candidates)
	require.Equal(t, 7, stats.Archived)
	e.requireArchived(true, ids...)
}

func TestArchiveFamilyRechecks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cutoff := autoarchive.Cutoff(e.clock.Now(), days)
	l := e.loop(autoarchive.Config{})

	t.Run("became busy", func(t *testing.T) {
		// A family that was a candidate when read but whose child is busy
		// now is skipped, not an error.
		root := e.create(nil, false)
		child := e.create(&root, true)
		e.backdate(root, child)
		archived, err := l.ArchiveFamily(e.ctx, root, cutoff)
		require.NoError(t, err)
		require.False(t, archived)
		e.requireArchived(false, root, child)
	})
	t.Run("got a message", func(t *testing.T) {
		root := e.create(nil, false)
		e.backdate(root)
		_, err := e.pool.Exec(e.ctx, `UPDATE chat_messages SET created_at = now() WHERE chat_id = $1`, root)
		require.NoError(t, err)
		archived, err := l.ArchiveFamily(e.ctx, root, cutoff)
		require.NoError(t, err)
		require.False(t, archived)
		e.requireArchived(false, root)
	})
	t.Run("gone", func(t *testing.T) {
		archived, err := l.ArchiveFamily(e.ctx, uuid.New(), cutoff)
		require.NoError(t, err)
		require.False(t, archived)
	})
	t.Run("rejected under the locks", func(t *testing.T) {
		// The candidate query cannot see every state SetArchived refuses:
		// a waiting child with queued messages is an invalid state. The
		// family transaction rejects it and changes nothing, and the loop
		// counts a skip.
		root := e.create(nil, false)
		child := e.create(&root, false)
		e.backdate(root, child)
		_, err := e.pool.Exec(e.ctx,
			`INSERT INTO chat_queued_messages (chat_id, position, created_at) VALUES ($1, 1, $2)`, child, e.old)
		require.NoError(t, err)
		require.Equal(t, chatstate.Invalid, e.state(child))

		archived, err := l.ArchiveFamily(e.ctx, root, cutoff)
		require.NoError(t, err)
		require.False(t, archived)
		e.requireArchived(false, root, child)
	})
	t.Run("tick counts skips", func(t *testing.T) {
		stats, err := l.Tick(e.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, stats.Candidates, "only the invalid family is read")
		require.Equal(t, 1, stats.Skipped)
		require.Zero(t, stats.Archived)
	})
}

func TestDisabled(t *testing.T) {
	t.Parallel()
	e := setup(t)
	idle := e.create(nil, false)
	e.backdate(idle)

	l := autoarchive.New(e.pool, e.machine, autoarchive.Config{Days: 0, Clock: e.clock})
	require.False(t, l.Enabled())
	stats, err := l.Tick(e.ctx)
	require.NoError(t, err)
	require.Zero(t, stats)

	// Run returns at once.
	done := make(chan error, 1)
	go func() { done <- l.Run(e.ctx) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run of a disabled loop did not return")
	}
	e.requireArchived(false, idle)
}

func TestRunTicksEveryInterval(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := e.create(nil, false)
	e.backdate(first)

	type tick struct {
		stats autoarchive.Stats
		err   error
	}
	ticks := make(chan tick, 10)
	l := e.loop(autoarchive.Config{
		Interval:  10 * time.Minute,
		AfterTick: func(s autoarchive.Stats, err error) { ticks <- tick{s, err} },
	})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	next := func() tick {
		t.Helper()
		select {
		case tk := <-ticks:
			require.NoError(t, tk.err)
			return tk
		case <-time.After(10 * time.Second):
			t.Fatal("no tick")
			return tick{}
		}
	}

	// The first tick runs at once.
	require.Equal(t, 1, next().stats.Archived)
	e.requireArchived(true, first)

	second := e.create(nil, false)
	e.backdate(second)
	e.clock.Advance(9 * time.Minute)
	select {
	case tk := <-ticks:
		t.Fatalf("tick before the interval: %+v", tk)
	case <-time.After(100 * time.Millisecond):
	}
	e.clock.Advance(time.Minute)
	require.Equal(t, 1, next().stats.Archived)
	e.requireArchived(true, second)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestConcurrentLoops(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var ids []uuid.UUID
	for range 10 {
		root := e.create(nil, false)
		child := e.create(&root, false)
		e.backdate(root, child)
		ids = append(ids, root, child)
	}
	// Every worker runs the loop: the same families are candidates for all
	// of them, and each family is archived once.
	const workers = 3
	results := make(chan autoarchive.Stats, workers)
	errs := make(chan error, workers)
	for range workers {
		go func() {
			stats, err := e.loop(autoarchive.Config{BatchSize: 3}).Tick(e.ctx)
			results <- stats
			errs <- err
		}()
	}
	archived := 0
	for range workers {
		require.NoError(t, <-errs)
		s := <-results
		require.Zero(t, s.Failed)
		archived += s.Archived
	}
	require.Equal(t, 10, archived)
	e.requireArchived(true, ids...)
}

// TestUnarchivedWithoutNewMessageIsArchivedAgain: only messages count as
// activity, so unarchiving alone does not save an idle family.
func TestUnarchivedWithoutNewMessageIsArchivedAgain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	root := e.create(nil, false)
	e.backdate(root)
	stats, err := e.loop(autoarchive.Config{}).Tick(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Archived)
	_, err = e.machine.SetFamilyArchived(e.ctx, root, false)
	require.NoError(t, err)
	e.requireArchived(false, root)
	stats, err = e.loop(autoarchive.Config{}).Tick(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Archived)
	e.requireArchived(true, root)
}
