// Package managertest holds test doubles for the runner manager and the
// acquisition loop: a fake runner that records what it is given, a factory
// that records every runner it made, and chat fixtures.
package managertest

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/services/worker/internal/runner"
)

// Runner is a fake runner.Runner: it records the events delivered to it
// and runs until its context ends.
type Runner struct {
	Spec runner.Spec

	mu      sync.Mutex
	events  []runner.Event
	started chan struct{}
	done    chan struct{}
}

// Run implements runner.Runner.
func (r *Runner) Run(ctx context.Context) error {
	close(r.started)
	defer close(r.done)
	<-ctx.Done()
	return nil
}

// Deliver implements runner.Runner.
func (r *Runner) Deliver(ev runner.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

// Events returns the events delivered so far.
func (r *Runner) Events() []runner.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runner.Event(nil), r.events...)
}

// Done is closed when Run has returned.
func (r *Runner) Done() <-chan struct{} { return r.done }

// Started is closed when Run was called.
func (r *Runner) Started() <-chan struct{} { return r.started }

// Factory makes fake runners and records each of them.
type Factory struct {
	mu      sync.Mutex
	runners []*Runner
}

// New is a manager.Factory.
func (f *Factory) New(_ runner.Deps, spec runner.Spec) runner.Runner {
	r := &Runner{Spec: spec, started: make(chan struct{}), done: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runners = append(f.runners, r)
	return r
}

// Runners returns every runner made so far, oldest first.
func (f *Factory) Runners() []*Runner {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Runner(nil), f.runners...)
}

// Get returns the runner made for (chatID, runnerID), or nil.
func (f *Factory) Get(chatID, runnerID uuid.UUID) *Runner {
	for _, r := range f.Runners() {
		if r.Spec.ChatID == chatID && r.Spec.RunnerID == runnerID {
			return r
		}
	}
	return nil
}

// Tenant is an organization and a user that chats belong to.
type Tenant struct {
	OrgID, UserID uuid.UUID
}

// NewTenant inserts an organization and a user.
func NewTenant(t testing.TB, pool *pgxpool.Pool) Tenant {
	t.Helper()
	tn := Tenant{OrgID: uuid.New(), UserID: uuid.New()}
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO organizations (id) VALUES ($1)`, tn.OrgID); err != nil {
		t.Fatalf("insert organization: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO users (id) VALUES ($1)`, tn.UserID); err != nil {
		t.Fatalf("insert user: %v", err)
	}
	return tn
}

// Chats inserts n unowned chats in status (running, waiting, ...) with an
// empty queue, children of parent when it is not nil, and returns their
// IDs.
func (tn Tenant) Chats(t testing.TB, pool *pgxpool.Pool, n int, status string, parent *uuid.UUID) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}
	_, err := pool.Exec(context.Background(), `
INSERT INTO chats (id, organization_id, owner_id, parent_chat_id, root_chat_id, title, status, snapshot_version)
SELECT id, $2, $3, $4, $4, 'chat', $5::chat_status, 1 FROM unnest($1::uuid[]) AS id`,
		ids, tn.OrgID, tn.UserID, parent, status)
	if err != nil {
		t.Fatalf("insert chats: %v", err)
	}
	return ids
}
