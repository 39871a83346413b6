package subagents

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// admitPrompt dispatches user_prompt_submit for a prompt the agent submits
// to a subagent chat (a spawn, before the child exists, or a message to an
// existing child): work the parent's turn already admitted, so it does not
// count against the admission share. It returns the prompt to store: the
// text (or the consumer's replacement) with the response's model_context
// and user_message as hook-context and hook-notice parts of the prompt
// itself, and the turn ID its dispatch carried (allocated here, stored with
// the prompt, so the child's worker events of that turn carry it too).
//
// A deny is a refusal: an error result for the calling model carrying the
// consumer's user_message (or reason). A failed dispatch refuses the call
// too, and is reported on ctx (agenttools.ReportFatal), so the parent's
// turn commits the results of the tools that ran and then enters error
// naming the dispatch ID (spec "Plan failure recovery"). Without active
// hooks the prompt is returned as is.
func (p *Provider) admitPrompt(ctx context.Context, child agenthooks.ChatRef, prompt string) (msg chatstate.NewMessage, refusal json.RawMessage) {
	msg = chatstate.UserMessage(chatmsg.Content{chatmsg.Text(prompt)})
	if !p.cfg.Hooks.Active() {
		return msg, nil
	}
	turn := uuid.New()
	child.TurnID, msg.TurnID = &turn, &turn
	ev, err := hooks.UserPromptSubmit(child, prompt, msg.Content.Marshal(), false)
	if err == nil {
		var resp agenthooks.Response
		resp, err = p.cfg.Hooks.Dispatch(ctx, ev)
		if err == nil {
			msg.Content, refusal = applyPromptResponse(msg.Content, resp)
			return msg, refusal
		}
	}
	if ctx.Err() == nil {
		agenttools.ReportFatal(ctx, err)
	}
	return msg, agenttools.ErrorResult(fmt.Sprintf("the subagent prompt was refused: %v", err))
}

func applyPromptResponse(content chatmsg.Content, resp agenthooks.Response) (chatmsg.Content, json.RawMessage) {
	if hooks.Denied(resp) {
		msg := resp.UserMessage
		if msg == "" {
			msg = resp.Permission.Reason
		}
		if msg == "" {
			msg = "no reason given"
		}
		return nil, agenttools.ErrorResult("the subagent prompt was denied by policy: " + msg)
	}
	if replacement, ok := hooks.PromptOverride(resp); ok {
		if replacement == "" {
			return nil, agenttools.ErrorResult("the subagent prompt was denied by policy: the policy removed the whole prompt")
		}
		content = chatmsg.Content{chatmsg.Text(replacement)}
	}
	ev := string(agenthooks.EventUserPromptSubmit)
	if resp.ModelContext != "" {
		content = append(content, chatmsg.HookContext(ev, resp.ModelContext))
	}
	if resp.UserMessage != "" {
		content = append(content, chatmsg.HookNotice(ev, resp.UserMessage))
	}
	return content, nil
}

// childRef identifies a subagent chat of parent (its root is the parent's
// root, or the parent).
func childRef(id, owner, parent uuid.UUID, parentRoot *uuid.UUID) agenthooks.ChatRef {
	root := parent
	if parentRoot != nil {
		root = *parentRoot
	}
	return agenthooks.ChatRef{ChatID: id, OwnerID: owner, ParentChatID: &parent, RootChatID: &root}
}
