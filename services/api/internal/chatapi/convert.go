package chatapi

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// Conversions between database rows and the wire types.

func chatToProto(c queries.Chat) (*chatdv1.Chat, error) {
	out := &chatdv1.Chat{
		Id:             c.ID.String(),
		OrganizationId: c.OrganizationID.String(),
		OwnerId:        c.OwnerID.String(),
		Title:          c.Title,
		TitleSource:    string(c.TitleSource),
		TitleUpdatedAt: timestamppb.New(c.TitleUpdatedAt),
		Status:         string(c.Status),
		Archived:       c.Archived,
		LastError:      c.LastError,
		CreatedAt:      timestamppb.New(c.CreatedAt),
		UpdatedAt:      timestamppb.New(c.UpdatedAt),
	}
	if c.RequiresActionDeadlineAt != nil {
		out.RequiresActionDeadlineAt = timestamppb.New(*c.RequiresActionDeadlineAt)
	}
	if c.ParentChatID != nil {
		out.ParentChatId = proto.String(c.ParentChatID.String())
	}
	if c.RootChatID != nil {
		out.RootChatId = proto.String(c.RootChatID.String())
	}
	if c.LastModelConfigID != nil {
		out.LastModelConfigId = proto.String(c.LastModelConfigID.String())
	}
	if c.ProjectID != nil {
		out.ProjectId = proto.String(c.ProjectID.String())
	}
	if len(c.RetryState) > 0 {
		var rs structpb.Struct
		if err := protojson.Unmarshal(c.RetryState, &rs); err != nil {
			return nil, fmt.Errorf("decode retry_state of chat %s: %w", c.ID, err)
		}
		out.RetryState = &rs
	}
	tools, err := dynamicToolsToProto(c.DynamicTools)
	if err != nil {
		return nil, fmt.Errorf("decode dynamic_tools of chat %s: %w", c.ID, err)
	}
	out.DynamicTools = tools
	return out, nil
}

// storedTool is a dynamic tool as chats.dynamic_tools stores it.
type storedTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

func dynamicToolsToProto(raw json.RawMessage) ([]*chatdv1.DynamicTool, error) {
	var tools []storedTool
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &tools); err != nil {
			return nil, err
		}
	}
	out := make([]*chatdv1.DynamicTool, 0, len(tools))
	for _, t := range tools {
		dt := &chatdv1.DynamicTool{Name: t.Name, Description: t.Description}
		if len(t.InputSchema) > 0 {
			dt.InputSchema = &structpb.Struct{}
			if err := protojson.Unmarshal(t.InputSchema, dt.InputSchema); err != nil {
				return nil, err
			}
		}
		out = append(out, dt)
	}
	return out, nil
}

func dynamicToolsFromProto(tools []*chatdv1.DynamicTool) (json.RawMessage, error) {
	stored := make([]storedTool, 0, len(tools))
	for _, t := range tools {
		st := storedTool{Name: t.GetName(), Description: t.GetDescription()}
		if t.GetInputSchema() != nil {
			b, err := protojson.Marshal(t.GetInputSchema())
			if err != nil {
				return nil, err
			}
			st.InputSchema = b
		} else {
			st.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		stored = append(stored, st)
	}
	return json.Marshal(stored)
}

func messageToProto(m queries.ChatMessage) (*chatdv1.Message, error) {
	content, err := chatmsg.ParseContent(m.Content)
	if err != nil {
		return nil, fmt.Errorf("message %d: %w", m.ID, err)
	}
	parts, err := partsToProto(content)
	if err != nil {
		return nil, fmt.Errorf("message %d: %w", m.ID, err)
	}
	out := &chatdv1.Message{
		Id:              m.ID,
		ChatId:          m.ChatID.String(),
		Role:            string(m.Role),
		Content:         parts,
		QueuedMessageId: m.QueuedMessageID,
		CreatedAt:       timestamppb.New(m.CreatedAt),
		ReasoningEffort: m.ReasoningEffort,
	}
	if m.ModelConfigID != nil {
		out.ModelConfigId = proto.String(m.ModelConfigID.String())
	}
	if len(m.Usage) > 0 {
		// The stored usage also holds the model call's runtime; a reply
		// cut short by an interrupt has the runtime only, its tokens
		// unknown.
		var u struct {
			PromptTokens *int64 `json:"prompt_tokens"`
			OutputTokens int64  `json:"output_tokens"`
			RuntimeMS    *int64 `json:"runtime_ms"`
		}
		if err := json.Unmarshal(m.Usage, &u); err != nil {
			return nil, fmt.Errorf("message %d usage: %w", m.ID, err)
		}
		if u.PromptTokens != nil {
			out.Usage = &chatdv1.Usage{PromptTokens: *u.PromptTokens, OutputTokens: u.OutputTokens}
		}
		out.RuntimeMs = u.RuntimeMS
	}
	return out, nil
}

func messagesToProto(ms []queries.ChatMessage) ([]*chatdv1.Message, error) {
	out := make([]*chatdv1.Message, 0, len(ms))
	for _, m := range ms {
		pm, err := messageToProto(m)
		if err != nil {
			return nil, err
		}
		out = append(out, pm)
	}
	return out, nil
}

func queuedToProto(q queries.ChatQueuedMessage) (*chatdv1.QueuedMessage, error) {
	content, err := chatmsg.ParseContent(q.Content)
	if err != nil {
		return nil, fmt.Errorf("queued message %d: %w", q.ID, err)
	}
	parts, err := partsToProto(content)
	if err != nil {
		return nil, fmt.Errorf("queued message %d: %w", q.ID, err)
	}
	out := &chatdv1.QueuedMessage{
		Id: q.ID, ChatId: q.ChatID.String(), Content: parts, Position: q.Position,
		CreatedAt: timestamppb.New(q.CreatedAt), ReasoningEffort: q.ReasoningEffort,
	}
	if q.CreatedBy != nil {
		out.CreatedBy = proto.String(q.CreatedBy.String())
	}
	if q.ModelConfigID != nil {
		out.ModelConfigId = proto.String(q.ModelConfigID.String())
	}
	return out, nil
}

func queuedListToProto(qs []queries.ChatQueuedMessage) ([]*chatdv1.QueuedMessage, error) {
	out := make([]*chatdv1.QueuedMessage, 0, len(qs))
	for _, q := range qs {
		pq, err := queuedToProto(q)
		if err != nil {
			return nil, err
		}
		out = append(out, pq)
	}
	return out, nil
}

// partsToProto converts content for clients: a hook-context part (a hook's
// model_context) is for the model only and never leaves chatd; a
// hook-notice part keeps its event.
func partsToProto(c chatmsg.Content) ([]*chatdv1.MessagePart, error) {
	c = c.ForUser()
	out := make([]*chatdv1.MessagePart, 0, len(c))
	for _, p := range c {
		pp := &chatdv1.MessagePart{Type: string(p.Type)}
		switch p.Type {
		case chatmsg.PartText, chatmsg.PartReasoning:
			pp.Text = proto.String(p.Text)
		case chatmsg.PartHookNotice:
			pp.Text, pp.Hook = proto.String(p.Text), proto.String(p.Hook)
		case chatmsg.PartToolCall:
			pp.ToolCallId, pp.ToolName = proto.String(p.ToolCallID), proto.String(p.ToolName)
			v, err := jsonToValue(p.Args)
			if err != nil {
				return nil, fmt.Errorf("tool-call %s args: %w", p.ToolCallID, err)
			}
			pp.Args = v
			if p.PolicyModified {
				pp.PolicyModified = proto.Bool(true) // "Modified by policy"
			}
			if p.IdempotencyKey != "" {
				pp.IdempotencyKey = proto.String(p.IdempotencyKey)
			}
		case chatmsg.PartToolResult:
			pp.ToolCallId, pp.ToolName = proto.String(p.ToolCallID), proto.String(p.ToolName)
			pp.IsError = proto.Bool(p.IsError)
			v, err := jsonToValue(p.Result)
			if err != nil {
				return nil, fmt.Errorf("tool-result %s: %w", p.ToolCallID, err)
			}
			pp.Result = v
		case chatmsg.PartFile:
			pp.FileId, pp.MediaType, pp.Name = proto.String(p.FileID), proto.String(p.MediaType), proto.String(p.Name)
		}
		out = append(out, pp)
	}
	return out, nil
}

func jsonToValue(raw json.RawMessage) (*structpb.Value, error) {
	if len(raw) == 0 {
		return structpb.NewNullValue(), nil
	}
	var v structpb.Value
	if err := protojson.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func valueToJSON(v *structpb.Value) (json.RawMessage, error) {
	if v == nil {
		return json.RawMessage(`null`), nil
	}
	return protojson.Marshal(v)
}
