package openaiapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// Function tools are chatd's client (dynamic) tools: the model calls one,
// the chat waits in requires_action, and the caller answers with
// function_call_output items in its next response.

// maxFunctionTools is ChatService's bound on a chat's client tools.
const maxFunctionTools = 64

// maxToolDescription bounds a function tool's description.
const maxToolDescription = 16 << 10

// functionTool is a function tool as the request gives it and the
// response echoes it (and as openai_responses.tools keeps it).
type functionTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// toolSet is what a request's tools and tool_choice ask of the turn.
type toolSet struct {
	// declared are the function tools as given (the response's tools).
	declared []functionTool
	// offered are the chat's client tools for the turn: the declared
	// ones, or none with tool_choice "none".
	offered []*chatdv1.DynamicTool
	// choice is "auto" or "none".
	choice string
}

// parseTools reads tools and tool_choice. Built-in OpenAI tools are a 400
// naming their type: chatd runs none of them.
func parseTools(raw []json.RawMessage, rawChoice json.RawMessage) (toolSet, error) {
	ts := toolSet{declared: []functionTool{}, offered: []*chatdv1.DynamicTool{}}
	if len(raw) > maxFunctionTools {
		return ts, badRequest("tools", "tools has %d tools; at most %d are allowed.", len(raw), maxFunctionTools)
	}
	seen := map[string]bool{}
	for i, r := range raw {
		t, err := parseTool(i, r)
		if err != nil {
			return ts, err
		}
		if seen[t.Name] {
			return ts, badRequest(fmt.Sprintf("tools[%d].name", i), "Two tools are named %s; each name must be unique.", quote(t.Name))
		}
		seen[t.Name] = true
		ts.declared = append(ts.declared, t)
	}
	choice, err := parseToolChoice(rawChoice)
	if err != nil {
		return ts, err
	}
	ts.choice = choice
	if choice == "none" {
		return ts, nil
	}
	for i, t := range ts.declared {
		dt := &chatdv1.DynamicTool{Name: t.Name}
		if t.Description != nil {
			dt.Description = *t.Description
		}
		if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
			var schema map[string]any
			_ = json.Unmarshal(t.Parameters, &schema) // checked by parseTool
			if dt.InputSchema, err = structpb.NewStruct(schema); err != nil {
				return ts, badRequest(fmt.Sprintf("tools[%d].parameters", i), "parameters must be a JSON Schema object.")
			}
		}
		ts.offered = append(ts.offered, dt)
	}
	return ts, nil
}

// parseTool reads tools[i]: a function tool, strictly.
func parseTool(i int, raw json.RawMessage) (functionTool, error) {
	param := fmt.Sprintf("tools[%d]", i)
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return functionTool{}, badRequest(param, "Each tool must be an object with a type.")
	}
	if head.Type == nil {
		return functionTool{}, badRequest(param+".type", "Each tool needs a type; chatd supports \"function\".")
	}
	if *head.Type != "function" {
		return functionTool{}, badRequest(param+".type",
			"The tool type %s is not supported: chatd runs no OpenAI built-in tools (web search, file search, computer use, code interpreter, image generation, MCP, …); declare a function tool and run it yourself.",
			quote(*head.Type))
	}
	var t functionTool
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return t, badRequest(param+"."+typeErr.Field, "%s.%s has the wrong type: it must be %s.", param, typeErr.Field, jsonKind(typeErr.Type.Kind().String()))
		}
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(field, `"`)
			return t, badRequest(param+"."+field, "A function tool has no field %s; it has name, description, parameters and strict.", quote(field))
		}
		return t, badRequest(param, "A function tool must be an object with name, description, parameters and strict.")
	}
	if !validToolName(t.Name) {
		return t, badRequest(param+".name", "A function name must be 1 to 64 letters, digits, '_' or '-'; got %s.", quote(t.Name))
	}
	if t.Description != nil {
		if len(*t.Description) > maxToolDescription || strings.ContainsRune(*t.Description, 0) {
			return t, badRequest(param+".description", "A tool's description must be at most %d bytes without NUL bytes.", maxToolDescription)
		}
	}
	if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
		var schema map[string]any
		if err := json.Unmarshal(t.Parameters, &schema); err != nil {
			return t, badRequest(param+".parameters", "parameters must be a JSON Schema object.")
		}
		if typ, ok := schema["type"]; ok && typ != "object" {
			return t, badRequest(param+".parameters", "parameters must describe an object (\"type\": \"object\"): a function's arguments are an object.")
		}
		if hasNUL(schema) {
			return t, badRequest(param+".parameters", "parameters must not contain NUL bytes.")
		}
	}
	return t, nil
}

// parseToolChoice reads tool_choice: chatd lets the model choose ("auto",
// the default) or offers it no tools ("none"); it cannot force a call.
func parseToolChoice(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "auto", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "auto", "none":
			return s, nil
		case "required":
			return "", badRequest("tool_choice", "tool_choice \"required\" is not supported: chatd lets the model decide whether to call a tool (\"auto\"), or offers it none (\"none\").")
		}
		return "", badRequest("tool_choice", "tool_choice must be \"auto\" or \"none\"; got %s.", quote(s))
	}
	var obj struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", badRequest("tool_choice", "tool_choice must be \"auto\" or \"none\".")
	}
	return "", badRequest("tool_choice", "tool_choice of type %s is not supported: chatd cannot force or restrict the model's tool calls; use \"auto\" or \"none\".", quote(obj.Type))
}

// validToolName is ChatService's rule for a client tool's name.
func validToolName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, r := range n {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// hasNUL reports a NUL byte in any string or key of a decoded JSON value:
// Postgres's jsonb refuses them.
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || hasNUL(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// functionNames are the names of a response's declared function tools,
// read from its record.
func functionNames(raw json.RawMessage) map[string]bool {
	var tools []functionTool
	_ = json.Unmarshal(raw, &tools)
	names := make(map[string]bool, len(tools))
	for _, t := range tools {
		names[t.Name] = true
	}
	return names
}
