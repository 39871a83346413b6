package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/agenthooks"
)

// maxRemembered bounds the pre_tool_use decisions kept in memory; the
// oldest are forgotten first.
const maxRemembered = 100_000

// policy is the consumer's state: its options, the log, and the remembered
// pre_tool_use decisions.
type policy struct {
	opts options
	now  func() time.Time

	logMu sync.Mutex
	out   io.Writer

	mu        sync.Mutex
	decisions map[toolKey]agenthooks.Response
	order     []toolKey
}

// toolKey identifies one logical tool call: the stable identifier of tool
// events is tool_use_id, scoped to its chat.
type toolKey struct {
	chat      uuid.UUID
	toolUseID string
}

func newPolicy(opts options, out io.Writer) (*policy, error) {
	if len(opts.secrets) == 0 {
		return nil, errors.New("no secret")
	}
	return &policy{opts: opts, now: time.Now, out: out, decisions: map[toolKey]agenthooks.Response{}}, nil
}

// handler is the SDK's verifying handler with this policy's callbacks.
func (p *policy) handler() http.Handler {
	opts := []agenthooks.HandlerOption{
		agenthooks.WithAdditionalSecrets(p.opts.secrets[1:]...),
		agenthooks.WithClock(func() time.Time { return p.now() }),
		agenthooks.WithRejectHook(func(r *http.Request, err error) {
			p.logLine(map[string]any{"msg": "rejected", "remote": r.RemoteAddr, "error": err.Error()})
		}),
	}
	if p.opts.issuer != "" {
		opts = append(opts, agenthooks.WithExpectedIssuer(p.opts.issuer))
	}
	return agenthooks.NewHTTPHandler(p.opts.secrets[0], p.opts.audience, agenthooks.Hooks{
		SessionStart: func(_ context.Context, m agenthooks.Meta, d agenthooks.SessionStartData) (agenthooks.Response, error) {
			p.logEvent(agenthooks.EventSessionStart, m, map[string]any{"source": d.Source}, "none")
			return agenthooks.Response{}, nil
		},
		UserPromptSubmit: p.userPromptSubmit,
		PreToolUse:       p.preToolUse,
		PostToolUse: func(_ context.Context, m agenthooks.Meta, d agenthooks.PostToolUseData) (agenthooks.Response, error) {
			extra := map[string]any{"tool_use_id": d.ToolUseID, "tool_name": d.ToolName}
			if d.ToolError != "" {
				extra["tool_error"] = d.ToolError
			}
			p.logEvent(agenthooks.EventPostToolUse, m, extra, "none")
			return agenthooks.Response{}, nil
		},
		PreCompact: func(_ context.Context, m agenthooks.Meta, _ agenthooks.PreCompactData) (agenthooks.Response, error) {
			p.logEvent(agenthooks.EventPreCompact, m, nil, "none")
			return agenthooks.Response{}, nil
		},
		PostCompact: func(_ context.Context, m agenthooks.Meta, _ agenthooks.PostCompactData) (agenthooks.Response, error) {
			p.logEvent(agenthooks.EventPostCompact, m, nil, "none")
			return agenthooks.Response{}, nil
		},
		Stop: func(_ context.Context, m agenthooks.Meta, _ agenthooks.StopData) (agenthooks.Response, error) {
			p.logEvent(agenthooks.EventStop, m, nil, "none")
			return agenthooks.Response{}, nil
		},
	}, opts...)
}

func (p *policy) userPromptSubmit(_ context.Context, m agenthooks.Meta, d agenthooks.UserPromptSubmitData) (agenthooks.Response, error) {
	extra := map[string]any{"prompt_bytes": len(d.Prompt)}
	if p.opts.logOnly || p.opts.replaceRe == nil || !p.opts.replaceRe.MatchString(d.Prompt) {
		p.logEvent(agenthooks.EventUserPromptSubmit, m, extra, "none")
		return agenthooks.Response{}, nil
	}
	replaced := p.opts.replaceRe.ReplaceAllString(d.Prompt, p.opts.replaceWith)
	extra["rewritten"] = true
	p.logEvent(agenthooks.EventUserPromptSubmit, m, extra, "allow")
	return agenthooks.AllowPrompt(replaced), nil
}

func (p *policy) preToolUse(_ context.Context, m agenthooks.Meta, d agenthooks.PreToolUseData) (agenthooks.Response, error) {
	key := toolKey{chat: m.ChatID, toolUseID: d.ToolUseID}
	extra := map[string]any{"tool_use_id": d.ToolUseID, "tool_name": d.ToolName}
	p.mu.Lock()
	defer p.mu.Unlock()
	if resp, ok := p.decisions[key]; ok {
		// A duplicate delivery (a retried HTTP attempt or the same call
		// dispatched again): the same logical event gets the same answer.
		extra["duplicate"] = true
		p.logEvent(agenthooks.EventPreToolUse, m, extra, decisionOf(resp))
		return resp, nil
	}
	var resp agenthooks.Response
	if !p.opts.logOnly && p.opts.denyTool != nil && p.opts.denyTool.MatchString(d.ToolName) {
		resp = agenthooks.Deny(fmt.Sprintf("the tool %q is denied by policy", d.ToolName))
		resp.ModelContext = fmt.Sprintf("Policy denies the tool %q; choose another way to proceed.", d.ToolName)
	}
	p.decisions[key] = resp
	p.order = append(p.order, key)
	if len(p.order) > maxRemembered {
		delete(p.decisions, p.order[0])
		p.order = p.order[1:]
	}
	p.logEvent(agenthooks.EventPreToolUse, m, extra, decisionOf(resp))
	return resp, nil
}

func decisionOf(r agenthooks.Response) string {
	if r.Permission == nil {
		return "none"
	}
	return string(r.Permission.Decision)
}

// logEvent writes one JSON object for an event: its identifiers, any
// event-specific fields, and the decision returned.
func (p *policy) logEvent(typ agenthooks.EventType, m agenthooks.Meta, extra map[string]any, decision string) {
	line := map[string]any{
		"msg":         "event",
		"type":        typ,
		"dispatch_id": m.DispatchID,
		"chat_id":     m.ChatID,
		"owner_id":    m.OwnerID,
		"decision":    decision,
	}
	for k, v := range map[string]*uuid.UUID{
		"workspace_id": m.WorkspaceID, "turn_id": m.TurnID,
		"parent_chat_id": m.ParentChatID, "root_chat_id": m.RootChatID,
	} {
		if v != nil {
			line[k] = *v
		}
	}
	for k, v := range extra {
		line[k] = v
	}
	p.logLine(line)
}

func (p *policy) logLine(line map[string]any) {
	line["time"] = p.now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	p.logMu.Lock()
	defer p.logMu.Unlock()
	_, _ = p.out.Write(append(b, '\n'))
}
