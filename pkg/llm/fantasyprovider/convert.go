package fantasyprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"charm.land/fantasy"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
)

// call builds fantasy's call for req.
func (m *Model) call(ctx context.Context, req llm.Request) (fantasy.Call, error) {
	prompt, err := m.prompt(ctx, req)
	if err != nil {
		return fantasy.Call{}, err
	}
	tools, err := toolsOf(req.Tools)
	if err != nil {
		return fantasy.Call{}, err
	}
	call := fantasy.Call{Prompt: prompt, Tools: tools}
	if req.MaxOutputTokens > 0 {
		call.MaxOutputTokens = new(int64(req.MaxOutputTokens))
	}
	m.applyOptions(&call, req)
	return call, nil
}

func toolsOf(specs []llm.ToolSpec) ([]fantasy.Tool, error) {
	var tools []fantasy.Tool
	for _, s := range specs {
		if s.Name == "" {
			return nil, llm.NewFatal(errors.New("a tool has no name"))
		}
		schema := map[string]any{"type": "object", "properties": map[string]any{}}
		if len(s.InputSchema) > 0 {
			schema = nil
			if err := json.Unmarshal(s.InputSchema, &schema); err != nil || schema == nil {
				return nil, llm.NewFatal(fmt.Errorf("tool %s: input schema is not a JSON object", s.Name))
			}
		}
		// fantasy's Anthropic conversion keeps "required" only as a
		// []string, and a decoded schema holds a []any.
		if req, ok := schema["required"].([]any); ok {
			names := make([]string, 0, len(req))
			for _, r := range req {
				if name, ok := r.(string); ok {
					names = append(names, name)
				}
			}
			schema["required"] = names
		}
		tools = append(tools, fantasy.FunctionTool{Name: s.Name, Description: s.Description, InputSchema: schema})
	}
	return tools, nil
}

// chatTransport reports whether the model speaks Chat Completions, whose
// assistant messages hold one text (fantasy keeps only the last text part).
func (m *Model) chatTransport() bool { return m.api == APIChatCompletions }

func (m *Model) prompt(ctx context.Context, req llm.Request) (fantasy.Prompt, error) {
	var prompt fantasy.Prompt
	if strings.TrimSpace(req.System) != "" {
		prompt = append(prompt, fantasy.NewSystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case llm.RoleSystem:
			var texts []string
			for _, p := range msg.Parts {
				if p.Type == chatmsg.PartText && strings.TrimSpace(p.Text) != "" {
					texts = append(texts, p.Text)
				}
			}
			if len(texts) > 0 {
				prompt = append(prompt, fantasy.NewSystemMessage(texts...))
			}
		case llm.RoleUser, llm.RoleTool:
			// Tool results first: they answer the previous assistant
			// message and must follow it directly.
			if results := toolResults(msg.Parts); len(results) > 0 {
				prompt = append(prompt, fantasy.Message{Role: fantasy.MessageRoleTool, Content: results})
			}
			if msg.Role == llm.RoleTool {
				continue
			}
			content, err := m.userContent(ctx, req.Files, msg.Parts)
			if err != nil {
				return nil, err
			}
			if len(content) > 0 {
				prompt = append(prompt, fantasy.Message{Role: fantasy.MessageRoleUser, Content: content})
			}
		case llm.RoleAssistant:
			if content := m.assistantContent(msg.Parts); len(content) > 0 {
				prompt = append(prompt, fantasy.Message{Role: fantasy.MessageRoleAssistant, Content: content})
			}
		default:
			return nil, llm.NewFatal(fmt.Errorf("message %d has unknown role %q", i, msg.Role))
		}
	}
	return prompt, nil
}

func toolResults(parts []chatmsg.Part) []fantasy.MessagePart {
	var out []fantasy.MessagePart
	for _, p := range parts {
		if p.Type != chatmsg.PartToolResult {
			continue
		}
		text := resultText(p.Result)
		var output fantasy.ToolResultOutputContent = fantasy.ToolResultOutputContentText{Text: text}
		if p.IsError {
			output = fantasy.ToolResultOutputContentError{Error: errors.New(text)}
		}
		out = append(out, fantasy.ToolResultPart{ToolCallID: p.ToolCallID, Output: output})
	}
	return out
}

// resultText is a tool result as the model reads it: a JSON string
// unquoted, any other JSON as is.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func (m *Model) userContent(ctx context.Context, files llm.FileLoader, parts []chatmsg.Part) ([]fantasy.MessagePart, error) {
	var out []fantasy.MessagePart
	for _, p := range parts {
		switch p.Type {
		case chatmsg.PartText:
			if p.Text != "" {
				out = append(out, fantasy.TextPart{Text: p.Text})
			}
		case chatmsg.PartFile:
			part, err := m.filePart(ctx, files, p)
			if err != nil {
				return nil, err
			}
			out = append(out, part)
		}
	}
	return out, nil
}

// filePart sends images and PDFs as files where the API takes them, text
// files inline, and anything else as a placeholder.
func (m *Model) filePart(ctx context.Context, files llm.FileLoader, p chatmsg.Part) (fantasy.MessagePart, error) {
	placeholder := fantasy.TextPart{Text: fmt.Sprintf("[attached file %q (%s) cannot be shown to this model]", fileName(p), p.MediaType)}
	mt := strings.ToLower(p.MediaType)
	isText := strings.HasPrefix(mt, "text/") || mt == "application/json"
	asFile := strings.HasPrefix(mt, "image/") || (mt == "application/pdf" && m.typ != modelconfig.ProviderOpenAICompat)
	if files == nil || (!isText && !asFile) {
		return placeholder, nil
	}
	data, err := files.LoadFile(ctx, p.FileID)
	if err != nil {
		if llm.IsTransient(err) {
			return nil, llm.NewRetryable(fmt.Errorf("load file %s: %w", p.FileID, err))
		}
		return nil, llm.NewFatal(fmt.Errorf("load file %s: %w", p.FileID, err))
	}
	if isText {
		return fantasy.TextPart{Text: fmt.Sprintf("<file name=%q media_type=%q>\n%s\n</file>", fileName(p), p.MediaType, data)}, nil
	}
	return fantasy.FilePart{Filename: p.Name, Data: data, MediaType: p.MediaType}, nil
}

func fileName(p chatmsg.Part) string {
	if p.Name != "" {
		return p.Name
	}
	return p.FileID
}

func (m *Model) assistantContent(parts []chatmsg.Part) []fantasy.MessagePart {
	var out []fantasy.MessagePart
	if m.chatTransport() {
		// One reasoning, one text, then the tool calls.
		var reasoning, text []string
		for _, p := range parts {
			switch p.Type {
			case chatmsg.PartReasoning:
				if p.Text != "" {
					reasoning = append(reasoning, p.Text)
				}
			case chatmsg.PartText:
				if p.Text != "" {
					text = append(text, p.Text)
				}
			}
		}
		if len(reasoning) > 0 {
			out = append(out, fantasy.ReasoningPart{Text: strings.Join(reasoning, "\n")})
		}
		if len(text) > 0 {
			out = append(out, fantasy.TextPart{Text: strings.Join(text, "\n")})
		}
		for _, p := range parts {
			if p.Type == chatmsg.PartToolCall {
				out = append(out, toolCallPart(p))
			}
		}
		return out
	}
	for _, p := range parts {
		switch p.Type {
		case chatmsg.PartText:
			if p.Text == "" {
				continue
			}
			// Adjacent texts are one text.
			if n := len(out); n > 0 {
				if prev, ok := out[n-1].(fantasy.TextPart); ok {
					prev.Text += p.Text
					out[n-1] = prev
					continue
				}
			}
			out = append(out, fantasy.TextPart{Text: p.Text})
		case chatmsg.PartReasoning:
			if p.Text != "" {
				out = append(out, fantasy.ReasoningPart{Text: p.Text})
			}
		case chatmsg.PartToolCall:
			out = append(out, toolCallPart(p))
		}
	}
	return out
}

func toolCallPart(p chatmsg.Part) fantasy.ToolCallPart {
	input := string(p.Args)
	if strings.TrimSpace(input) == "" {
		input = "{}"
	}
	return fantasy.ToolCallPart{ToolCallID: p.ToolCallID, ToolName: p.ToolName, Input: input}
}
