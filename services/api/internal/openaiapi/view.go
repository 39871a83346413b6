package openaiapi

import (
	"encoding/json"
	"fmt"
	"strings"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// responseObject is OpenAI's Response as chatd fills it.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Background         bool              `json:"background"`
	Model              string            `json:"model"`
	Instructions       *string           `json:"instructions"`
	Metadata           map[string]string `json:"metadata"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Conversation       *conversationRef  `json:"conversation"`
	Output             []outputItem      `json:"output"`
	OutputText         string            `json:"output_text"`
	Usage              *usage            `json:"usage"`
	Error              *responseError    `json:"error"`
	IncompleteDetails  *struct{}         `json:"incomplete_details"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	ToolChoice         string            `json:"tool_choice"`
	Tools              json.RawMessage   `json:"tools"`
	Store              bool              `json:"store"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Text               map[string]any    `json:"text"`
}

type conversationRef struct {
	ID string `json:"id"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type usage struct {
	InputTokens         int64          `json:"input_tokens"`
	OutputTokens        int64          `json:"output_tokens"`
	TotalTokens         int64          `json:"total_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
}

// outputItem is a message, a reasoning or a function_call item of output.
type outputItem struct {
	ID      string        `json:"id"`
	Type    string        `json:"type"`
	Status  string        `json:"status,omitempty"`
	Role    string        `json:"role,omitempty"`
	Content []outputPart  `json:"content,omitempty"`
	Summary []summaryPart `json:"summary,omitempty"`
	// function_call: the call the client answers with a
	// function_call_output of the same call_id.
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

type outputPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type summaryPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// view renders the turn as a Response.
func (t turn) view() responseObject {
	r := t.skeleton(t.status())
	var text strings.Builder
	var u usage
	hasUsage := false
	calls := map[string]functionCall{}
	for _, c := range t.calls {
		calls[fmt.Sprintf("%d_%d", c.messageID, c.part)] = c
	}
	for _, m := range t.output {
		if m.GetRole() != "assistant" {
			continue
		}
		if mu := m.GetUsage(); mu != nil {
			hasUsage = true
			u.InputTokens += mu.GetPromptTokens()
			u.OutputTokens += mu.GetOutputTokens()
		}
		for i, p := range m.GetContent() {
			switch p.GetType() {
			case "text":
				r.Output = append(r.Output, textItem(m, i, p.GetText()))
				text.WriteString(p.GetText())
			case "reasoning":
				r.Output = append(r.Output, outputItem{ID: fmt.Sprintf("rs_%d_%d", m.GetId(), i), Type: "reasoning",
					Summary: []summaryPart{{Type: "summary_text", Text: p.GetText()}}})
			case "tool-call":
				if c, ok := calls[fmt.Sprintf("%d_%d", m.GetId(), i)]; ok {
					r.Output = append(r.Output, functionCallItem(c))
				}
			}
		}
	}
	r.OutputText = text.String()
	if hasUsage {
		u.TotalTokens = u.InputTokens + u.OutputTokens
		r.Usage = &u
	}
	if r.Status == "failed" {
		msg := t.chat.GetLastError()
		if msg == "" {
			msg = "The model call failed."
		}
		r.Error = &responseError{Code: "server_error", Message: msg}
	}
	return r
}

func textItem(m *chatdv1.Message, i int, text string) outputItem {
	return outputItem{ID: fmt.Sprintf("msg_%d_%d", m.GetId(), i), Type: "message", Status: "completed", Role: "assistant",
		Content: []outputPart{{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}}}
}

// skeleton is the response with status and no output: what
// response.created and response.in_progress carry.
func (t turn) skeleton(status string) responseObject {
	r := responseObject{
		ID: formatID(responsePrefix, t.rec.ID), Object: "response", CreatedAt: t.rec.CreatedAt.Unix(),
		Status: status, Background: t.rec.Background, Model: t.rec.Model, Instructions: t.rec.Instructions,
		Metadata: map[string]string{}, Output: []outputItem{}, ParallelToolCalls: true, ToolChoice: t.rec.ToolChoice,
		Tools: t.rec.Tools, Store: true, Truncation: "disabled", Text: map[string]any{"format": map[string]string{"type": "text"}},
	}
	if len(r.Tools) == 0 {
		r.Tools = json.RawMessage(`[]`)
	}
	if r.ToolChoice == "" {
		r.ToolChoice = "auto"
	}
	_ = json.Unmarshal(t.rec.Metadata, &r.Metadata)
	if t.rec.PreviousResponseID != nil {
		id := formatID(responsePrefix, *t.rec.PreviousResponseID)
		r.PreviousResponseID = &id
	}
	if t.rec.Conversation {
		r.Conversation = &conversationRef{ID: formatID(conversationPrefix, t.rec.ChatID)}
	}
	return r
}
