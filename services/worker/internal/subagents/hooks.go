package subagents

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// admitPrompt dispatches user_prompt_submit for a prompt the agent submits
// to a subagent chat (a spawn, before the child exists, or a message to an
// existing child): work the parent's turn already admitted, so it does not
// count against the admission share. It returns the content to store: the
// prompt (or the consumer's replacement) with the response's model_context
// and user_message as parts for one audience, which chatstate stores as a
// model-only and a user-only row beside it.
//
// A deny is a refusal: an error result for the calling model carrying the
// consumer's user_message (or reason). A failed dispatch refuses the call
// too, and is reported on ctx (agenttools.ReportFatal), so the parent's
// turn commits the results of the tools that ran and then enters error
// naming the dispatch ID (spec "Plan failure recovery"). Without active
// hooks the prompt is returned as is.
func (p *Provider) admitPrompt(ctx context.Context, child agenthooks.ChatRef, prompt string) (content chatmsg.Content, refusal json.RawMessage) {
	content = chatmsg.Content{chatmsg.Text(prompt)}
	if !p.cfg.Hooks.Active() {
		return content, nil
	}
	ev, err := hooks.UserPromptSubmit(child, prompt, content.Marshal(), false)
	if err == nil {
		var resp agenthooks.Response
		resp, err = p.cfg.Hooks.Dispatch(ctx, ev)
		if err == nil {
			return applyPromptResponse(content, resp)
		}
	}
	if ctx.Err() == nil {
		agenttools.ReportFatal(ctx, err)
	}
	return nil, agenttools.ErrorResult(fmt.Sprintf("the subagent prompt was refused: %v", err))
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
		content = append(content, chatmsg.AudienceText(chatmsg.AudienceModel, ev, resp.ModelContext))
	}
	if resp.UserMessage != "" {
		content = append(content, chatmsg.AudienceText(chatmsg.AudienceUser, ev, resp.UserMessage))
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
