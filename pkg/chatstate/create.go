package chatstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chatd/chatd/pkg/db/queries"
)

// CreateParams describes a new chat. The caller supplies the ID so retries
// and tests are deterministic.
type CreateParams struct {
	ID             uuid.UUID
	OrganizationID uuid.UUID
	OwnerID        uuid.UUID
	// ParentChatID makes the chat a child (subagent) of that chat.
	ParentChatID *uuid.UUID
	// ProjectID puts a root chat in a project (its memory); a child chat
	// cannot have one.
	ProjectID       *uuid.UUID
	Title           string
	TitleSource     queries.ChatTitleSource
	SystemPrompt    string
	DynamicTools    json.RawMessage
	ModelConfigID   *uuid.UUID
	ReasoningEffort *string
	// Messages is the initial history. Without a user message the chat is
	// created waiting; with one it is created running.
	Messages []NewMessage
	// InTx, if set, runs inside the creating transaction after the chat
	// landed (e.g. to record an idempotency key); its error rolls back.
	InTx func(ctx context.Context, tx *Tx) error
}

// CreateResult is the created chat and its initial history.
type CreateResult struct {
	Result
	Messages []queries.ChatMessage
}

// Create inserts a chat and its initial history in one transaction. It is
// the one transition with no row to lock first; a child chat instead takes a
// shared lock on its family root and fails if the root is archived, so a new
// child never joins an archived family.
func (m *Machine) Create(ctx context.Context, p CreateParams) (CreateResult, error) {
	if p.ID == uuid.Nil {
		return CreateResult{}, fmt.Errorf("create chat: an ID is required: %w", ErrInvalidArgument)
	}
	if p.TitleSource == "" {
		p.TitleSource = queries.ChatTitleSourceFallback
	}
	if len(p.DynamicTools) == 0 {
		p.DynamicTools = json.RawMessage(`[]`)
	}
	if p.ProjectID != nil && p.ParentChatID != nil {
		return CreateResult{}, fmt.Errorf("create chat %s: a subagent chat cannot be in a project: %w", p.ID, ErrInvalidArgument)
	}
	status, variant := StatusWaiting, VariantNoUserMessage
	for _, msg := range p.Messages {
		if err := msg.validate(); err != nil {
			return CreateResult{}, fmt.Errorf("create chat %s: %w", p.ID, err)
		}
		if msg.Role == RoleUser {
			status, variant = StatusRunning, ""
		}
	}
	var res CreateResult
	err := m.inTx(ctx, func(ptx pgx.Tx) error {
		q := queries.New(ptx)
		var rootID *uuid.UUID
		if p.ParentChatID != nil {
			parent, err := q.ChatGet(ctx, *p.ParentChatID)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("create child of chat %s: parent %w", *p.ParentChatID, ErrChatNotFound)
			}
			if err != nil {
				return fmt.Errorf("read parent chat %s: %w", *p.ParentChatID, err)
			}
			root := parent.ID
			if parent.RootChatID != nil {
				root = *parent.RootChatID
			}
			archived, err := q.ChatLockShare(ctx, root)
			if err != nil {
				return fmt.Errorf("lock family root %s: %w", root, err)
			}
			if archived {
				return fmt.Errorf("create child of chat %s: %w", *p.ParentChatID, ErrFamilyArchived)
			}
			rootID = &root
		}
		now, err := m.createNow(ctx, q)
		if err != nil {
			return err
		}
		chat, err := q.ChatInsert(ctx, queries.ChatInsertParams{
			ID: p.ID, OrganizationID: p.OrganizationID, OwnerID: p.OwnerID,
			ParentChatID: p.ParentChatID, RootChatID: rootID,
			Title: p.Title, TitleSource: p.TitleSource, Now: now,
			SystemPrompt: p.SystemPrompt, DynamicTools: p.DynamicTools,
			LastModelConfigID: p.ModelConfigID, LastReasoningEffort: p.ReasoningEffort,
			ProjectID: p.ProjectID, Status: status,
		})
		if err != nil {
			return fmt.Errorf("insert chat %s: %w", p.ID, err)
		}
		tx := &Tx{m: m, q: q, chat: chat, now: now}
		res.Messages, err = tx.insertMessages(ctx, p.Messages)
		if err != nil {
			return err
		}
		tx.created = res.Messages
		if err := tx.land(ctx, Create, N, variant); err != nil {
			return err
		}
		if p.InTx != nil {
			if err := p.InTx(ctx, tx); err != nil {
				return err
			}
		}
		res.Result = Result{Snapshot: tx.snapshot(), Applied: tx.applied}
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "chats_pkey" {
		// The chat exists: Create is only allowed from N.
		existing, getErr := m.Get(ctx, p.ID)
		if getErr != nil {
			return CreateResult{}, errors.Join(err, getErr)
		}
		return CreateResult{}, &TransitionError{Transition: Create, State: existing.State(), Ownership: existing.Ownership()}
	}
	if err != nil {
		return CreateResult{}, err
	}
	m.afterCommit(ctx, res.Snapshot)
	return res, nil
}

// createNow is Create's clock: the injected one, else Postgres's.
func (m *Machine) createNow(ctx context.Context, q *queries.Queries) (time.Time, error) {
	if m.cfg.Now != nil {
		return m.cfg.Now(), nil
	}
	now, err := q.DatabaseNow(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}
