package chatapi

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/hooks"
)

// Reasons of prompts the lifecycle hook consumer stopped.
const (
	// ReasonHookDenied: the consumer denied the prompt (403); the message
	// is the consumer's user_message.
	ReasonHookDenied = "HOOK_DENIED"
	// ReasonHookFailed: the dispatch failed (timeout, connection, status,
	// malformed, over capacity) and the prompt was not admitted (503); the
	// message names the dispatch ID.
	ReasonHookFailed = "HOOK_FAILED"
)

// chatRef identifies chat (an existing one) for a hook event.
func chatRef(chat queries.Chat) agenthooks.ChatRef {
	return agenthooks.ChatRef{
		ChatID: chat.ID, OwnerID: chat.OwnerID,
		ParentChatID: chat.ParentChatID, RootChatID: chat.RootChatID,
	}
}

// admitPrompt dispatches user_prompt_submit for a prompt being admitted
// (create, send, queue, edit), before anything is persisted, and returns the
// content to store: unchanged, or with its text replaced by the consumer's
// override, plus the response's effects as parts of the prompt (hookParts).
// ref carries the prompt's turn ID (newTurn). A deny is a 403 carrying the
// consumer's user_message; a failed dispatch is a 503 naming the dispatch
// ID. Either way nothing is saved. Without active hooks it returns content
// as is.
func (s *Server) admitPrompt(ctx context.Context, ref agenthooks.ChatRef, content chatmsg.Content) (chatmsg.Content, error) {
	if !s.hooks.Active() || len(content) == 0 {
		return content, nil
	}
	ev, err := hooks.UserPromptSubmit(ref, content.PlainText(), content.Marshal(), true)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	resp, err := s.hooks.Dispatch(ctx, ev)
	if err != nil {
		return nil, s.hookError(ctx, err)
	}
	if hooks.Denied(resp) {
		msg := resp.UserMessage
		if msg == "" {
			msg = "the prompt was denied by policy"
		}
		return nil, statusError(codes.PermissionDenied, ReasonHookDenied, msg)
	}
	if replacement, ok := hooks.PromptOverride(resp); ok {
		content = replacePromptText(content, replacement)
		if len(content) == 0 {
			return nil, statusError(codes.PermissionDenied, ReasonHookDenied, "the policy removed the whole prompt")
		}
	}
	return append(content, hookParts(agenthooks.EventUserPromptSubmit, resp)...), nil
}

// hookParts are a response's model_context and user_message as typed parts
// of the prompt message itself (spec: "stored as typed parts of the prompt
// message"): a hook-context part the model reads and clients never see,
// and a hook-notice part clients show attached to the prompt and the model
// never reads.
func hookParts(ev agenthooks.EventType, resp agenthooks.Response) chatmsg.Content {
	var out chatmsg.Content
	if resp.ModelContext != "" {
		out = append(out, chatmsg.HookContext(string(ev), resp.ModelContext))
	}
	if resp.UserMessage != "" {
		out = append(out, chatmsg.HookNotice(string(ev), resp.UserMessage))
	}
	return out
}

// newTurn allocates the turn ID of a prompt about to be admitted and sets
// it on ref: its session_start and user_prompt_submit carry it, the prompt
// row stores it (chatstate.NewMessage.TurnID), and the worker's events of
// the turn carry it too. Without active hooks it allocates nothing (the
// worker derives an ID should hooks be turned on later).
func (s *Server) newTurn(ref *agenthooks.ChatRef) *uuid.UUID {
	if !s.hooks.Active() {
		return nil
	}
	id := uuid.New()
	ref.TurnID = &id
	return &id
}

// hookError maps a failed dispatch to the request's error: 503 naming the
// dispatch ID (the caller's own cancellation stays a cancellation).
func (s *Server) hookError(ctx context.Context, err error) error {
	de, ok := hooks.AsDispatchError(err)
	switch {
	case ok && de.Result == hooks.ResultCanceled:
		return status.FromContextError(ctx.Err()).Err()
	case ok:
		return statusError(codes.Unavailable, ReasonHookFailed, fmt.Sprintf(
			"the lifecycle hook consumer did not answer the %s event (dispatch %s: %s); nothing was saved, try again later",
			de.Type, de.DispatchID, de.Result))
	}
	return s.fail(ctx, err)
}

// startSession dispatches session_start at admission time: source is
// resume when the chat already has an assistant reply, startup otherwise.
// Its response carries no decision; a failed dispatch rejects the request.
// Its model_context and user_message are returned as hook parts for the
// caller to attach to the prompt it admits (see hookParts).
func (s *Server) startSession(ctx context.Context, ref agenthooks.ChatRef, hasReply bool) (chatmsg.Content, error) {
	source := agenthooks.SourceStartup
	if hasReply {
		source = agenthooks.SourceResume
	}
	resp, err := s.hooks.Dispatch(ctx, hooks.SessionStart(ref, source, true))
	if err != nil {
		return nil, s.hookError(ctx, err)
	}
	return hookParts(agenthooks.EventSessionStart, resp), nil
}

// hasAssistantReply reports whether chat has a (non-deleted) assistant
// message.
func (s *Server) hasAssistantReply(ctx context.Context, chatID uuid.UUID) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM chat_messages WHERE chat_id = $1 AND role = 'assistant' AND NOT deleted)`,
		chatID).Scan(&ok)
	return ok, err
}

// hasUserPrompt reports whether chat has a (non-deleted) user message: a
// chat created empty has none until its first prompt.
func (s *Server) hasUserPrompt(ctx context.Context, chatID uuid.UUID) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM chat_messages WHERE chat_id = $1 AND role = 'user' AND NOT deleted)`,
		chatID).Scan(&ok)
	return ok, err
}

// replacePromptText replaces the text parts of content by one text part,
// replacement, where the first one was; other parts (files) stay. An empty
// replacement drops the text.
func replacePromptText(content chatmsg.Content, replacement string) chatmsg.Content {
	out := make(chatmsg.Content, 0, len(content)+1)
	placed := false
	for _, p := range content {
		if p.Type != chatmsg.PartText {
			out = append(out, p)
			continue
		}
		if !placed && replacement != "" {
			out = append(out, chatmsg.Text(replacement))
		}
		placed = true
	}
	if !placed && replacement != "" {
		out = append(chatmsg.Content{chatmsg.Text(replacement)}, out...)
	}
	return out
}

// admitToChat is admitPrompt for a prompt sent to (or replacing one in) the
// existing chat rawID. Admission first: it checks the caller owns the
// chat, then, on a view of it, check — everything the transition would
// refuse the request for on its own (a state that does not allow it, a
// full queue, a missing edit target) — so a request that will be refused
// dispatches nothing. It returns the content to store and the prompt's
// turn ID (newTurn).
//
// A send to an errored chat resumes it, an edit restarts it, and the first
// prompt of a chat created empty starts its agent loop for the first time,
// so those first dispatch session_start (see startSession).
func (s *Server) admitToChat(ctx context.Context, c auth.Claims, rawID string, content chatmsg.Content, edit bool, check func(*chatstate.Tx) error) (chatmsg.Content, *uuid.UUID, error) {
	if !s.hooks.Active() {
		return content, nil, nil
	}
	chat, err := s.readChat(ctx, c, rawID)
	if err != nil {
		return nil, nil, err
	}
	if err := s.machine.View(ctx, chat.ID, func(tx *chatstate.Tx) error {
		chat = tx.Chat()
		return check(tx)
	}); err != nil {
		return nil, nil, s.fail(ctx, err)
	}
	ref := chatRef(chat)
	turnID := s.newTurn(&ref)
	starts := edit || chat.Status == queries.ChatStatusError
	if !starts {
		prompted, err := s.hasUserPrompt(ctx, chat.ID)
		if err != nil {
			return nil, nil, s.fail(ctx, err)
		}
		starts = !prompted
	}
	var session chatmsg.Content
	if starts {
		hasReply, err := s.hasAssistantReply(ctx, chat.ID)
		if err != nil {
			return nil, nil, s.fail(ctx, err)
		}
		if session, err = s.startSession(ctx, ref, hasReply); err != nil {
			return nil, nil, err
		}
	}
	content, err = s.admitPrompt(ctx, ref, content)
	if err != nil {
		return nil, nil, err
	}
	return append(content, session...), turnID, nil
}

// newChatRef identifies a chat being created.
func newChatRef(id, owner uuid.UUID) agenthooks.ChatRef {
	return agenthooks.ChatRef{ChatID: id, OwnerID: owner}
}

// clearSession dispatches session_start with source clear before a /clear
// commits (outside its transaction: no row lock is held while a consumer
// answers). Admission first: on a view of the chat it checks what the
// clear would be refused for (a state that does not allow it, nothing to
// clear), so a refused clear dispatches nothing. A failed dispatch rejects
// the clear, nothing changes. The consumer's model_context and
// user_message become a hook-context and a hook-notice message after the
// clear boundary (chatstate.HookEffects), so the next prompt's model sees
// the context and the user the notice.
func (s *Server) clearSession(ctx context.Context, c auth.Claims, rawID string) ([]chatstate.NewMessage, error) {
	if !s.hooks.Active() {
		return nil, nil
	}
	chat, err := s.readChat(ctx, c, rawID)
	if err != nil {
		return nil, err
	}
	if err := s.machine.View(ctx, chat.ID, func(tx *chatstate.Tx) error {
		chat = tx.Chat()
		return checkClear(ctx, tx)
	}); err != nil {
		return nil, s.fail(ctx, err)
	}
	resp, err := s.hooks.Dispatch(ctx, hooks.SessionStart(chatRef(chat), agenthooks.SourceClear, false))
	if err != nil {
		return nil, s.hookError(ctx, err)
	}
	return chatstate.HookEffects(string(agenthooks.EventSessionStart), resp.ModelContext, resp.UserMessage), nil
}
