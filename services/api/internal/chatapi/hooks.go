package chatapi

import (
	"context"
	"fmt"
	"strings"

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
// override. A deny is a 403 carrying the consumer's user_message; a failed
// dispatch is a 503 naming the dispatch ID. Either way nothing is saved.
// Without active hooks it returns content as is.
func (s *Server) admitPrompt(ctx context.Context, ref agenthooks.ChatRef, content chatmsg.Content) (chatmsg.Content, error) {
	if !s.hooks.Active() || len(content) == 0 {
		return content, nil
	}
	var prompt strings.Builder
	for _, p := range content {
		if p.Type == chatmsg.PartText {
			prompt.WriteString(p.Text)
		}
	}
	ev, err := hooks.UserPromptSubmit(ref, prompt.String(), content.Marshal(), true)
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
	// model_context and user_message ride on the prompt as parts for one
	// audience; chatstate stores them as a model-only and a user-only row
	// beside the prompt row when it enters history (a queued prompt keeps
	// them until it is promoted; clients never see the model part).
	return append(content, effectParts(agenthooks.EventUserPromptSubmit, resp)...), nil
}

// effectParts are a response's model_context and user_message as parts of
// a prompt for one audience (chatmsg.Part.Audience).
func effectParts(ev agenthooks.EventType, resp agenthooks.Response) chatmsg.Content {
	var out chatmsg.Content
	if resp.ModelContext != "" {
		out = append(out, chatmsg.AudienceText(chatmsg.AudienceModel, string(ev), resp.ModelContext))
	}
	if resp.UserMessage != "" {
		out = append(out, chatmsg.AudienceText(chatmsg.AudienceUser, string(ev), resp.UserMessage))
	}
	return out
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
// Its model_context and user_message are returned as parts for one
// audience, for the caller to attach to the prompt it admits (see
// effectParts).
func (s *Server) startSession(ctx context.Context, ref agenthooks.ChatRef, hasReply bool) (chatmsg.Content, error) {
	source := agenthooks.SourceStartup
	if hasReply {
		source = agenthooks.SourceResume
	}
	resp, err := s.hooks.Dispatch(ctx, hooks.SessionStart(ref, source, true))
	if err != nil {
		return nil, s.hookError(ctx, err)
	}
	return effectParts(agenthooks.EventSessionStart, resp), nil
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
// existing chat rawID: it checks the caller owns the chat and that the chat
// is not archived before dispatching, so a request that cannot be admitted
// reaches no consumer.
//
// A send to an errored chat resumes it and an edit restarts it, so those
// first dispatch session_start (see startSession).
func (s *Server) admitToChat(ctx context.Context, c auth.Claims, rawID string, content chatmsg.Content, edit bool) (chatmsg.Content, error) {
	if !s.hooks.Active() {
		return content, nil
	}
	chat, err := s.readChat(ctx, c, rawID)
	if err != nil {
		return nil, err
	}
	if chat.Archived {
		return content, nil // the transition rejects it; no dispatch
	}
	ref := chatRef(chat)
	var session chatmsg.Content
	if edit || chat.Status == queries.ChatStatusError {
		hasReply, err := s.hasAssistantReply(ctx, chat.ID)
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		if session, err = s.startSession(ctx, ref, hasReply); err != nil {
			return nil, err
		}
	}
	content, err = s.admitPrompt(ctx, ref, content)
	if err != nil {
		return nil, err
	}
	return append(content, session...), nil
}

// newChatRef identifies a chat being created.
func newChatRef(id, owner uuid.UUID) agenthooks.ChatRef {
	return agenthooks.ChatRef{ChatID: id, OwnerID: owner}
}

// clearSession dispatches session_start with source clear before a /clear
// commits (outside its transaction: no row lock is held while a consumer
// answers). A failed dispatch rejects the clear, nothing changes. The
// consumer's model_context and user_message become a model-only and a
// user-only row after the clear boundary, so the next prompt's model sees
// the context and the user the message.
func (s *Server) clearSession(ctx context.Context, rawID string) ([]chatstate.NewMessage, error) {
	if !s.hooks.Active() {
		return nil, nil
	}
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	chat, err := s.readChat(ctx, c, rawID)
	if err != nil {
		return nil, err
	}
	resp, err := s.hooks.Dispatch(ctx, hooks.SessionStart(chatRef(chat), agenthooks.SourceClear, false))
	if err != nil {
		return nil, s.hookError(ctx, err)
	}
	var out []chatstate.NewMessage
	if resp.ModelContext != "" {
		out = append(out, chatstate.NewMessage{Role: chatstate.RoleUser, Visibility: chatstate.VisibleToModel,
			Content: chatmsg.Content{chatmsg.Text(resp.ModelContext)}})
	}
	if resp.UserMessage != "" {
		out = append(out, chatstate.NewMessage{Role: chatstate.RoleUser, Visibility: chatstate.VisibleToUser,
			Content: chatmsg.Content{chatmsg.Text(resp.UserMessage)}})
	}
	return out, nil
}
