package memory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
	"github.com/chatd/chatd/services/worker/internal/memory"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type fixture struct {
	t       *testing.T
	ctx     context.Context
	pool    *pgxpool.Pool
	m       *chatstate.Machine
	p       *memory.Provider
	org     uuid.UUID
	user    uuid.UUID
	project uuid.UUID
}

func setup(t *testing.T) *fixture {
	t.Helper()
	b := &fixture{t: t, ctx: context.Background(), pool: dbtest.NewPool(t), org: uuid.New(), user: uuid.New(), project: uuid.New()}
	b.m = chatstate.New(b.pool, chatstate.Config{})
	b.p = memory.New(b.pool, nil)
	q := queries.New(b.pool)
	require.NoError(t, q.OrganizationEnsure(b.ctx, queries.OrganizationEnsureParams{ID: b.org}))
	require.NoError(t, q.UserEnsure(b.ctx, queries.UserEnsureParams{ID: b.user}))
	_, err := q.ProjectInsert(b.ctx, queries.ProjectInsertParams{ID: b.project, OrganizationID: b.org, OwnerID: b.user, Name: "p", Now: time.Now()})
	require.NoError(t, err)
	return b
}

// chat creates an idle chat, in the project when inProject, a child of
// parent when set.
func (b *fixture) chat(inProject bool, parent *uuid.UUID) queries.Chat {
	b.t.Helper()
	p := chatstate.CreateParams{ID: uuid.New(), OrganizationID: b.org, OwnerID: b.user, ParentChatID: parent, Title: "t",
		Messages: []chatstate.NewMessage{{Role: chatstate.RoleSystem, Content: chatmsg.Content{chatmsg.Text("s")}}}}
	if inProject {
		p.ProjectID = &b.project
	}
	res, err := b.m.Create(b.ctx, p)
	require.NoError(b.t, err)
	return res.Chat
}

func (b *fixture) toolbox(chat queries.Chat) *agenttools.Toolbox {
	b.t.Helper()
	tb, err := agenttools.Collect(b.ctx, chat, []agenttools.Provider{b.p})
	require.NoError(b.t, err)
	return tb
}

// run calls tool with args and decodes the result.
func (b *fixture) run(chat queries.Chat, tool string, args any) (map[string]any, bool) {
	b.t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(b.t, err)
	out, isErr := b.toolbox(chat).Run(b.ctx, "call", tool, raw)
	var res map[string]any
	require.NoError(b.t, json.Unmarshal(out, &res), string(out))
	return res, isErr
}

func (b *fixture) seed(from, n int) {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, `
INSERT INTO chat_project_memories (project_id, name, title, content)
SELECT $1::uuid, 'seed-' || lpad(i::text, 3, '0'), 'seeded', 'content'
FROM generate_series($2::int, $3::int - 1) AS i`, b.project, from, from+n)
	require.NoError(b.t, err)
}

func (b *fixture) count() int {
	b.t.Helper()
	n, err := queries.New(b.pool).MemoryCount(b.ctx, b.project)
	require.NoError(b.t, err)
	return int(n)
}

// TestOfferedOnlyToRootChatsInAProject: no memory tools outside a project
// or in a subagent; the three tools in a project's root chat.
func TestOfferedOnlyToRootChatsInAProject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	outside := b.chat(false, nil)
	require.Empty(t, b.toolbox(outside).Specs())
	root := b.chat(true, nil)
	child := b.chat(false, &root.ID)
	require.Empty(t, b.toolbox(child).Specs(), "a subagent has no memory tools")
	// A child row carrying a project (the schema forbids it) is refused too.
	child.ProjectID = &b.project
	require.Empty(t, b.toolbox(child).Specs())

	var names []string
	for _, s := range b.toolbox(root).Specs() {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{memory.ToolDelete, memory.ToolRead, memory.ToolSave}, names)

	_, err := b.m.Create(b.ctx, chatstate.CreateParams{ID: uuid.New(), OrganizationID: b.org, OwnerID: b.user, ParentChatID: &root.ID, ProjectID: &b.project, Title: "t"})
	require.ErrorIs(t, err, chatstate.ErrInvalidArgument, "a subagent cannot be created in a project")
}

// TestSaveReadDeleteAndTheLiveIndex: a memory saved by one chat is read by
// another chat of the project, listed in read_memory's description, and
// gone after delete_memory.
func TestSaveReadDeleteAndTheLiveIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer, reader := b.chat(true, nil), b.chat(true, nil)

	desc := func() string {
		for _, s := range b.toolbox(reader).Specs() {
			if s.Name == memory.ToolRead {
				return s.Description
			}
		}
		t.Fatal("no read_memory")
		return ""
	}
	require.Contains(t, desc(), "0 of at most 200")

	res, isErr := b.run(writer, memory.ToolSave, map[string]any{"name": "style", "title": "Code style", "content": "tabs"})
	require.False(t, isErr, res)
	require.Equal(t, true, res["created"])
	require.EqualValues(t, 1, res["count"])
	require.Contains(t, desc(), "1 of at most 200")
	require.Contains(t, desc(), "\n- style: Code style")

	res, isErr = b.run(reader, memory.ToolRead, map[string]any{"name": "style"})
	require.False(t, isErr, res)
	require.Equal(t, "tabs", res["content"])

	res, isErr = b.run(reader, memory.ToolSave, map[string]any{"name": "style", "title": "Code style", "content": "gofmt"})
	require.False(t, isErr, res)
	require.Equal(t, false, res["created"], "the same name replaces the memory")
	res, _ = b.run(writer, memory.ToolRead, map[string]any{})
	require.EqualValues(t, 1, res["count"])
	res, _ = b.run(writer, memory.ToolRead, map[string]any{"name": "style"})
	require.Equal(t, "gofmt", res["content"])

	res, isErr = b.run(writer, memory.ToolDelete, map[string]any{"name": "style"})
	require.False(t, isErr, res)
	res, isErr = b.run(writer, memory.ToolRead, map[string]any{"name": "style"})
	require.True(t, isErr)
	require.Contains(t, res["error"], `no memory is named "style"`)
	_, isErr = b.run(writer, memory.ToolDelete, map[string]any{"name": "style"})
	require.True(t, isErr, "deleting a missing memory is an error")
	require.NotContains(t, desc(), "style")

	for _, bad := range []map[string]any{{"name": "", "content": "x"}, {"name": "a\nb", "content": "x"}, {"name": "n", "content": " "}} {
		_, isErr := b.run(writer, memory.ToolSave, bad)
		require.True(t, isErr, bad)
	}
	require.Zero(t, b.count())
}

// TestCapAndPruneReminders: from 180 memories a save carries a reminder;
// at 200 a new name is refused with an error saying what to do, while an
// existing name still saves.
func TestCapAndPruneReminders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chat := b.chat(true, nil)
	b.seed(0, 178)
	res, isErr := b.run(chat, memory.ToolSave, map[string]any{"name": "n179", "content": "c"})
	require.False(t, isErr, res)
	require.EqualValues(t, 179, res["count"])
	require.Nil(t, res["reminder"], "no reminder below 180")

	res, isErr = b.run(chat, memory.ToolSave, map[string]any{"name": "n180", "content": "c"})
	require.False(t, isErr, res)
	require.EqualValues(t, 180, res["count"])
	require.Contains(t, res["reminder"], "180 of at most 200")

	b.seed(178, 20)
	require.Equal(t, 200, b.count())
	res, isErr = b.run(chat, memory.ToolSave, map[string]any{"name": "n201", "content": "c"})
	require.True(t, isErr)
	require.Contains(t, res["error"], "full (200 of 200 memories)")
	require.Contains(t, res["error"], "in this same turn")
	require.Equal(t, 200, b.count())

	res, isErr = b.run(chat, memory.ToolSave, map[string]any{"name": "n180", "content": "folded"})
	require.False(t, isErr, res)
	require.EqualValues(t, 200, res["count"])
	require.Contains(t, res["reminder"], "200 of at most 200")

	_, isErr = b.run(chat, memory.ToolDelete, map[string]any{"name": "seed-000"})
	require.False(t, isErr)
	_, isErr = b.run(chat, memory.ToolSave, map[string]any{"name": "n201", "content": "c"})
	require.False(t, isErr, "after a delete the new name fits")
}

// TestConcurrentSavesNeverPassTheCap: with 199 memories, concurrent saves
// of new names serialize on the project's advisory lock, so exactly one
// lands.
func TestConcurrentSavesNeverPassTheCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chat := b.chat(true, nil)
	b.seed(0, 199)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]bool, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("race-%d", i), "content": "c"})
			tb, err := agenttools.Collect(b.ctx, chat, []agenttools.Provider{b.p})
			if err != nil {
				errs[i] = true
				return
			}
			_, errs[i] = tb.Run(b.ctx, "call", memory.ToolSave, raw)
		}()
	}
	wg.Wait()
	ok := 0
	for _, failed := range errs {
		if !failed {
			ok++
		}
	}
	require.Equal(t, 1, ok, "exactly one new memory fits")
	require.Equal(t, 200, b.count())
}

func TestLockKeyIsPerProject(t *testing.T) {
	a, c := uuid.New(), uuid.New()
	require.Equal(t, memory.LockKey(a), memory.LockKey(a))
	require.NotEqual(t, memory.LockKey(a), memory.LockKey(c))
}
