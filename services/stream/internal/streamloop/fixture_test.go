package streamloop_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/services/stream/internal/streamloop"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type fixture struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	m    *chatstate.Machine
	user uuid.UUID
	org  uuid.UUID
}

func setup(t *testing.T) *fixture {
	h := &fixture{t: t, ctx: context.Background(), pool: dbtest.NewPool(t), user: uuid.New(), org: uuid.New()}
	h.m = chatstate.New(h.pool, chatstate.Config{})
	q := queries.New(h.pool)
	require.NoError(t, q.OrganizationEnsure(h.ctx, queries.OrganizationEnsureParams{ID: h.org, Name: "org"}))
	require.NoError(t, q.UserEnsure(h.ctx, queries.UserEnsureParams{ID: h.user, Name: "user"}))
	return h
}

func text(s string) chatmsg.Content { return chatmsg.Content{chatmsg.Text(s)} }

// create makes a running chat: a system prompt and one user message.
func (h *fixture) create() uuid.UUID {
	id := uuid.New()
	_, err := h.m.Create(h.ctx, chatstate.CreateParams{
		ID: id, OrganizationID: h.org, OwnerID: h.user, Title: "t",
		DynamicTools: json.RawMessage(`[{"name":"ask_user","description":"Ask","input_schema":{"type":"object"}}]`),
		Messages: []chatstate.NewMessage{
			{Role: chatstate.RoleSystem, Content: text("You are helpful.")},
			chatstate.UserMessage(text("hello")),
		},
	})
	require.NoError(h.t, err)
	return id
}

func (h *fixture) do(id uuid.UUID, fn func(*chatstate.Tx) error) queries.Chat {
	h.t.Helper()
	res, err := h.m.Update(h.ctx, id, fn)
	require.NoError(h.t, err)
	return res.Chat
}

func (h *fixture) commitAndFinish(id uuid.UUID, reply string) queries.Chat {
	return h.do(id, func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: text(reply)}}}); err != nil {
			return err
		}
		_, err := tx.FinishTurn(h.ctx)
		return err
	})
}

func (h *fixture) send(id uuid.UUID, msg string) queries.Chat {
	return h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(h.ctx, chatstate.UserMessage(text(msg)), chatstate.BusyQueue)
		return err
	})
}

func (h *fixture) acquire(id, worker uuid.UUID) queries.Chat {
	return h.do(id, func(tx *chatstate.Tx) error { return tx.Acquire(h.ctx, worker, uuid.New()) })
}

func (h *fixture) attempt(id uuid.UUID) queries.Chat {
	return h.do(id, func(tx *chatstate.Tx) error { return tx.RecordGenerationAttempt(h.ctx) })
}

func (h *fixture) retryState(id uuid.UUID) queries.Chat {
	return h.do(id, func(tx *chatstate.Tx) error {
		return tx.RecordRetryState(h.ctx, chatstate.RetryState{Attempt: 1, DelayMS: 500, Error: "overloaded"})
	})
}

func (h *fixture) commitStep(id uuid.UUID, reply string) queries.Chat {
	return h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant, Content: text(reply)}}})
		return err
	})
}

func (h *fixture) finishError(id uuid.UUID) queries.Chat {
	return h.do(id, func(tx *chatstate.Tx) error { return tx.FinishError(h.ctx, "model failed") })
}

func (h *fixture) interrupt(id uuid.UUID) queries.Chat {
	return h.do(id, func(tx *chatstate.Tx) error { _, err := tx.Interrupt(h.ctx); return err })
}

// requireAction commits a dynamic tool call and parks the chat in
// requires_action.
func (h *fixture) requireAction(id uuid.UUID) queries.Chat {
	return h.do(id, func(tx *chatstate.Tx) error {
		if _, err := tx.CommitStep(h.ctx, chatstate.Step{Messages: []chatstate.NewMessage{{Role: chatstate.RoleAssistant,
			Content: chatmsgToolCall("call-1")}}}); err != nil {
			return err
		}
		return tx.EnterRequiresAction(h.ctx)
	})
}

// editFirstUser replaces the chat's first user message with s.
func (h *fixture) editFirstUser(id uuid.UUID, s string) queries.Chat {
	msgs, err := h.listVisible(id)
	require.NoError(h.t, err)
	var userID int64
	for _, m := range msgs {
		if m.Role == queries.ChatMessageRoleUser {
			userID = m.ID
			break
		}
	}
	require.NotZero(h.t, userID)
	return h.do(id, func(tx *chatstate.Tx) error {
		_, err := tx.EditMessage(h.ctx, userID, chatstate.UserMessage(text(s)), nil)
		return err
	})
}

func (h *fixture) chat(id uuid.UUID) queries.Chat {
	c, err := queries.New(h.pool).ChatGet(h.ctx, id)
	require.NoError(h.t, err)
	return c
}

// view is what a client builds from events: the history, the queue, the
// status, and the error and action_required events it saw.
type view struct {
	Messages []string // "id:role:text"
	Queue    []string
	Status   string
	Errors   int
	Actions  int
	Resets   int
	Preview  []string // message_part JSON since the last preview_reset
}

func partText(ps []streamloop.Part) string {
	s := ""
	for _, p := range ps {
		if p.Text != nil {
			s += *p.Text
		}
	}
	return s
}

func (v *view) apply(t *testing.T, evs []streamloop.Event) {
	for _, e := range evs {
		switch e.Type {
		case streamloop.TypeHistoryReset:
			v.Messages = nil
			v.Resets++
		case streamloop.TypeMessage:
			m := e.Payload.(streamloop.Message)
			key := m.Role + ":" + partText(m.Content)
			found := false
			for i, old := range v.Messages {
				if old[:len(idPrefix(m.ID))] == idPrefix(m.ID) {
					v.Messages[i] = idPrefix(m.ID) + key
					found = true
				}
			}
			if !found {
				v.Messages = append(v.Messages, idPrefix(m.ID)+key)
			}
		case streamloop.TypeQueueUpdate:
			v.Queue = nil
			for _, q := range e.Payload.(streamloop.QueuePayload).QueuedMessages {
				v.Queue = append(v.Queue, partText(q.Content))
			}
		case streamloop.TypeStatus:
			v.Status = e.Payload.(streamloop.StatusPayload).Status
		case streamloop.TypeError:
			v.Errors++
		case streamloop.TypeActionRequired:
			v.Actions++
		case streamloop.TypeRetry:
		case streamloop.TypePreviewReset:
			v.Preview = nil
		case streamloop.TypeMessagePart:
			v.Preview = append(v.Preview, string(e.Payload.(*streamloop.MessagePart).Part))
		default:
			t.Fatalf("unexpected event type %q", e.Type)
		}
	}
}

func idPrefix(id int64) string {
	b, _ := json.Marshal(id)
	return string(b) + "|"
}

// types lists the event types, leaving out preview_reset (allTypes keeps
// it).
func types(evs []streamloop.Event) []string {
	out := []string{}
	for _, e := range evs {
		if e.Type != streamloop.TypePreviewReset {
			out = append(out, e.Type)
		}
	}
	return out
}

func allTypes(evs []streamloop.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// wire renders events as the client sees them (JSON), for comparisons.
func wire(t *testing.T, evs []streamloop.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		e.Cursor = streamloop.Cursor{}
		b, err := json.Marshal(e)
		require.NoError(t, err)
		out[i] = string(b)
	}
	return out
}

func (h *fixture) listVisible(id uuid.UUID) ([]queries.ChatMessage, error) {
	return queries.New(h.pool).ChatMessageListVisible(h.ctx, id)
}
