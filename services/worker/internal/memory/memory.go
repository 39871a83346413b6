// Package memory is project memory (spec "Project memory"): the
// read_memory, save_memory and delete_memory tools, offered only to root
// chats in a project. The agent saves memory itself; there is no background
// extraction and no background cleanup. The live index (every memory's name
// and title) is in the read_memory tool description, built for each
// generation step, so the system prompt prefix stays cacheable.
package memory

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// Limits of a project's memory.
const (
	// MaxMemories is the most memories a project holds; a save of a new
	// name beyond it fails.
	MaxMemories = 200
	// ReminderFrom is the count from which save results remind the agent
	// to prune.
	ReminderFrom = 180
	// MaxNameRunes, MaxTitleRunes and MaxContentBytes bound one memory.
	MaxNameRunes    = 100
	MaxTitleRunes   = 200
	MaxContentBytes = 16 << 10
)

// The tool names.
const (
	ToolRead   = "read_memory"
	ToolSave   = "save_memory"
	ToolDelete = "delete_memory"
)

// lockNamespace is "chatdmem" in ASCII; it keeps the memory locks apart
// from other advisory locks keyed by UUIDs (the model-config lock of an
// organization uses "chatmcfg").
const lockNamespace uint64 = 0x63686174646d656d

// LockKey is the key of the transaction-scoped advisory lock that serializes
// a project's memory writes: the XOR of the UUID's two big-endian halves and
// lockNamespace. Two projects sharing a key only serialize each other.
func LockKey(projectID uuid.UUID) int64 {
	hi := binary.BigEndian.Uint64(projectID[:8])
	lo := binary.BigEndian.Uint64(projectID[8:])
	return int64(hi ^ lo ^ lockNamespace)
}

// Provider offers the memory tools to root chats in a project.
type Provider struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

// New returns the memory tool provider. now is the clock of updated_at
// (time.Now when nil).
func New(pool *pgxpool.Pool, now func() time.Time) *Provider {
	if now == nil {
		now = time.Now
	}
	return &Provider{pool: pool, now: now}
}

// Tools implements agenttools.Provider: nothing for a chat outside a
// project or for a subagent; otherwise the three tools, with the project's
// live index in read_memory's description.
func (p *Provider) Tools(ctx context.Context, chat queries.Chat) ([]agenttools.Tool, error) {
	if chat.ProjectID == nil || chat.ParentChatID != nil {
		return nil, nil
	}
	project := *chat.ProjectID
	index, err := queries.New(p.pool).MemoryIndex(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("error reading the memory index of project %s: %w", project, err)
	}
	bind := func(f func(context.Context, uuid.UUID, agenttools.Call) (json.RawMessage, bool, error)) func(context.Context, agenttools.Call) (json.RawMessage, bool, error) {
		return func(ctx context.Context, c agenttools.Call) (json.RawMessage, bool, error) { return f(ctx, project, c) }
	}
	// Every memory tool may run again after a crash (agenttools.Effect):
	// reading changes nothing, a save of a name replaces that memory, a
	// second delete finds nothing to delete.
	return []agenttools.Tool{
		{Spec: llm.ToolSpec{Name: ToolRead, Description: readDescription(index), InputSchema: readSchema}, Run: bind(p.read), Effect: agenttools.EffectRetry},
		{Spec: llm.ToolSpec{Name: ToolSave, Description: saveDescription, InputSchema: saveSchema}, Run: bind(p.save), Effect: agenttools.EffectRetry},
		{Spec: llm.ToolSpec{Name: ToolDelete, Description: deleteDescription, InputSchema: deleteSchema}, Run: bind(p.delete), Effect: agenttools.EffectRetry},
	}, nil
}

var (
	readSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"name":{"type":"string","description":"The memory to read; omit it to list every memory's name and title."}` +
		`},"additionalProperties":false}`)
	saveSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"name":{"type":"string","description":"A short stable key, e.g. \"build-commands\". Saving an existing name replaces that memory."},` +
		`"title":{"type":"string","description":"One line saying what the memory is about; shown in the index."},` +
		`"content":{"type":"string","description":"The memory itself."}` +
		`},"required":["name","content"],"additionalProperties":false}`)
	deleteSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"name":{"type":"string","description":"The memory to delete."}` +
		`},"required":["name"],"additionalProperties":false}`)
)

const saveDescription = "Save a durable memory shared by every chat of this project: facts, decisions and " +
	"conventions worth knowing in later chats, not the details of this task. Save under an existing name to " +
	"update it; prefer folding related facts into one memory. The project holds at most 200 memories."

const deleteDescription = "Delete a project memory that is wrong, stale or folded into another one."

// readDescription is read_memory's description with the live index.
func readDescription(index []queries.MemoryIndexRow) string {
	var b strings.Builder
	b.WriteString("Read a memory of this project by name (omit name to list them). ")
	fmt.Fprintf(&b, "The project has %d of at most %d memories", len(index), MaxMemories)
	if len(index) == 0 {
		b.WriteString(".")
		return b.String()
	}
	b.WriteString(":")
	for _, m := range index {
		b.WriteString("\n- ")
		b.WriteString(m.Name)
		if m.Title != "" {
			b.WriteString(": ")
			b.WriteString(m.Title)
		}
	}
	return b.String()
}

type indexEntry struct {
	Name      string    `json:"name"`
	Title     string    `json:"title,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (p *Provider) read(ctx context.Context, project uuid.UUID, c agenttools.Call) (json.RawMessage, bool, error) {
	var args struct {
		Name *string `json:"name"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return agenttools.ErrorResult("invalid arguments: " + err.Error()), true, nil
	}
	q := queries.New(p.pool)
	if args.Name == nil || *args.Name == "" {
		index, err := q.MemoryIndex(ctx, project)
		if err != nil {
			return nil, true, err
		}
		out := struct {
			Count    int          `json:"count"`
			Limit    int          `json:"limit"`
			Memories []indexEntry `json:"memories"`
		}{Count: len(index), Limit: MaxMemories, Memories: make([]indexEntry, 0, len(index))}
		for _, m := range index {
			out.Memories = append(out.Memories, indexEntry{Name: m.Name, Title: m.Title, UpdatedAt: m.UpdatedAt})
		}
		return agenttools.JSONResult(out)
	}
	m, err := q.MemoryGet(ctx, queries.MemoryGetParams{ProjectID: project, Name: *args.Name})
	if errors.Is(err, pgx.ErrNoRows) {
		return agenttools.ErrorResult(fmt.Sprintf("no memory is named %q; call read_memory without a name to list them", *args.Name)), true, nil
	}
	if err != nil {
		return nil, true, err
	}
	return agenttools.JSONResult(map[string]any{
		"name": m.Name, "title": m.Title, "content": m.Content, "updated_at": m.UpdatedAt,
	})
}

// SaveResult is save_memory's result.
type SaveResult struct {
	Saved   string `json:"saved"`
	Created bool   `json:"created"`
	Count   int64  `json:"count"`
	Limit   int    `json:"limit"`
	// Reminder asks the agent to prune, from ReminderFrom memories on.
	Reminder string `json:"reminder,omitempty"`
}

// errFull is the refusal of a new name at the cap.
type errFull struct{ count int64 }

func (e errFull) Error() string {
	return fmt.Sprintf("project memory is full (%d of %d memories): delete a memory with delete_memory, "+
		"or fold this one into an existing memory by saving under its name, in this same turn", e.count, MaxMemories)
}

func (p *Provider) save(ctx context.Context, project uuid.UUID, c agenttools.Call) (json.RawMessage, bool, error) {
	var args struct {
		Name    string `json:"name"`
		Title   string `json:"title"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return agenttools.ErrorResult("invalid arguments: " + err.Error()), true, nil
	}
	args.Name, args.Title = strings.TrimSpace(args.Name), strings.TrimSpace(args.Title)
	if msg := validate(args.Name, args.Title, args.Content); msg != "" {
		return agenttools.ErrorResult(msg), true, nil
	}
	var res SaveResult
	err := p.locked(ctx, project, func(q *queries.Queries) error {
		n, err := q.MemoryCount(ctx, project)
		if err != nil {
			return err
		}
		if n >= MaxMemories {
			_, err := q.MemoryGet(ctx, queries.MemoryGetParams{ProjectID: project, Name: args.Name})
			if errors.Is(err, pgx.ErrNoRows) {
				return errFull{count: n}
			}
			if err != nil {
				return err
			}
		}
		created, err := q.MemoryUpsert(ctx, queries.MemoryUpsertParams{
			ProjectID: project, Name: args.Name, Title: args.Title, Content: args.Content,
			ChatID: &c.Chat.ID, Now: p.now(),
		})
		if err != nil {
			return err
		}
		if created {
			n++
		}
		res = SaveResult{Saved: args.Name, Created: created, Count: n, Limit: MaxMemories}
		return nil
	})
	var full errFull
	if errors.As(err, &full) {
		return agenttools.ErrorResult(full.Error()), true, nil
	}
	if err != nil {
		return nil, true, err
	}
	if res.Count >= ReminderFrom {
		res.Reminder = fmt.Sprintf("project memory holds %d of at most %d memories: prune it now, deleting stale "+
			"memories and folding related ones together", res.Count, MaxMemories)
	}
	return agenttools.JSONResult(res)
}

func (p *Provider) delete(ctx context.Context, project uuid.UUID, c agenttools.Call) (json.RawMessage, bool, error) {
	var args struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return agenttools.ErrorResult("invalid arguments: " + err.Error()), true, nil
	}
	var deleted bool
	var n int64
	err := p.locked(ctx, project, func(q *queries.Queries) error {
		rows, err := q.MemoryDelete(ctx, queries.MemoryDeleteParams{ProjectID: project, Name: args.Name})
		if err != nil {
			return err
		}
		deleted = rows > 0
		n, err = q.MemoryCount(ctx, project)
		return err
	})
	if err != nil {
		return nil, true, err
	}
	if !deleted {
		return agenttools.ErrorResult(fmt.Sprintf("no memory is named %q", args.Name)), true, nil
	}
	return agenttools.JSONResult(map[string]any{"deleted": args.Name, "count": n, "limit": MaxMemories})
}

// locked runs fn in a transaction holding the project's advisory lock, so
// the count it reads cannot change before it commits.
func (p *Provider) locked(ctx context.Context, project uuid.UUID, fn func(q *queries.Queries) error) error {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("error beginning a memory write: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	q := queries.New(tx)
	if err := q.MemoryLockProject(ctx, LockKey(project)); err != nil {
		return fmt.Errorf("error locking the memory of project %s: %w", project, err)
	}
	if err := fn(q); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing a memory write: %w", err)
	}
	return nil
}

// validate returns why a memory is refused, or "".
func validate(name, title, content string) string {
	switch {
	case name == "":
		return "name is required"
	case utf8.RuneCountInString(name) > MaxNameRunes:
		return fmt.Sprintf("name is longer than %d characters", MaxNameRunes)
	case strings.ContainsAny(name, "\n\r"):
		return "name must be one line"
	case utf8.RuneCountInString(title) > MaxTitleRunes:
		return fmt.Sprintf("title is longer than %d characters", MaxTitleRunes)
	case strings.ContainsAny(title, "\n\r"):
		return "title must be one line"
	case strings.TrimSpace(content) == "":
		return "content is required"
	case len(content) > MaxContentBytes:
		return fmt.Sprintf("content is %d bytes; the limit is %d", len(content), MaxContentBytes)
	}
	return ""
}
