package openaiapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// createRequest is POST /v1/responses's body. Fields chatd does not act on
// yet but that clients commonly send with defaults are accepted and named
// in docs/openai.md; any other field is a 400 naming it.
type createRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Conversation       json.RawMessage   `json:"conversation"`
	Background         bool              `json:"background"`
	Stream             bool              `json:"stream"`
	Metadata           map[string]string `json:"metadata"`
	Store              *bool             `json:"store"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`

	// Accepted and not acted on (the model config decides them).
	Temperature       json.RawMessage `json:"temperature"`
	TopP              json.RawMessage `json:"top_p"`
	MaxOutputTokens   json.RawMessage `json:"max_output_tokens"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`
	Truncation        json.RawMessage `json:"truncation"`
	User              json.RawMessage `json:"user"`
	StreamOptions     json.RawMessage `json:"stream_options"`
	Include           json.RawMessage `json:"include"`
	Text              json.RawMessage `json:"text"`
	Reasoning         json.RawMessage `json:"reasoning"`
}

// Metadata bounds, as OpenAI's.
const (
	maxMetadataPairs    = 16
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
)

// decodeBody reads exactly one JSON object into v, answering in words a
// person understands.
func decodeBody(r *http.Request, v any) error {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest("", "The request body could not be read.")
	}
	if !utf8.Valid(raw) {
		return badRequest("", "The request body is not valid UTF-8.")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return badRequest(typeErr.Field, "%s has the wrong type: it must be %s.", typeErr.Field, jsonKind(typeErr.Type.Kind().String()))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badRequest(field, "chatd does not support the parameter %s (see docs/openai.md).", quote(field))
		}
		return badRequest("", "The request body is not a valid JSON object.")
	}
	if dec.More() {
		return badRequest("", "The request body must be exactly one JSON object.")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "The request body must be exactly one JSON object.")
	}
	return nil
}

func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "map", "struct":
		return "an object"
	case "slice":
		return "a list"
	}
	return "a number"
}

// validate checks what does not depend on stored state.
func (req *createRequest) validate() error {
	if req.Store != nil && !*req.Store {
		return badRequest("store", "store=false is not supported: a response is a turn of a stored chat, and that storage is what lets it outlive the client and the worker. Delete it when you are done (DELETE /v1/responses/{id}, DELETE /v1/conversations/{id}).")
	}
	if req.PreviousResponseID != nil && len(req.Conversation) > 0 && string(req.Conversation) != "null" {
		return badRequest("conversation", "Give previous_response_id or conversation, not both.")
	}
	if err := validMetadata(req.Metadata); err != nil {
		return err
	}
	if req.Instructions != nil && strings.ContainsRune(*req.Instructions, 0) {
		return badRequest("instructions", "instructions must not contain NUL bytes.")
	}
	return nil
}

// validMetadata checks metadata against OpenAI's bounds.
func validMetadata(meta map[string]string) error {
	if len(meta) > maxMetadataPairs {
		return badRequest("metadata", "metadata has %d pairs; at most %d are allowed.", len(meta), maxMetadataPairs)
	}
	for k, v := range meta {
		if k == "" || len(k) > maxMetadataKeyLen || strings.ContainsRune(k, 0) {
			return badRequest("metadata", "A metadata key must be 1 to %d characters without NUL bytes.", maxMetadataKeyLen)
		}
		if len(v) > maxMetadataValueLen || strings.ContainsRune(v, 0) {
			return badRequest("metadata", "The metadata value of %s is over %d characters or has NUL bytes.", quote(k), maxMetadataValueLen)
		}
	}
	return nil
}

// inputItem is one item of input when it is a list: a message, or a
// function_call_output.
type inputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	CallID  *string         `json:"call_id"`
	Output  json.RawMessage `json:"output"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// functionOutput is a function_call_output item: the result of one
// function call.
type functionOutput struct {
	CallID string
	Output string
}

// input is a request's input: the texts of one user message, or the
// outputs of the function calls the previous response ended with.
type input struct {
	texts   []string
	outputs []functionOutput
}

// maxCallIDLen bounds a function_call_output's call_id.
const maxCallIDLen = 256

// parseInput reads input: a string, or a list of user message items, or a
// list of function_call_output items.
func parseInput(raw json.RawMessage) (input, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return input{}, badRequest("input", "input is required: a string or a list of message items.")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		texts, err := checkTexts("input", []string{s})
		return input{texts: texts}, err
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return input{}, badRequest("input", "input must be a string or a list of message or function_call_output items.")
	}
	if len(items) == 0 {
		return input{}, badRequest("input", "input must not be an empty list.")
	}
	var in input
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			texts, err := messageTexts(param, it)
			if err != nil {
				return input{}, err
			}
			in.texts = append(in.texts, texts...)
		case "function_call_output":
			out, err := parseFunctionOutput(param, it)
			if err != nil {
				return input{}, err
			}
			in.outputs = append(in.outputs, out)
		case "function_call", "reasoning", "item_reference":
			return input{}, badRequest(param+".type", "The input item type %s is not accepted: chatd keeps the conversation's history itself, so continue it with previous_response_id (or conversation) and send only the new items.", quote(it.Type))
		default:
			return input{}, badRequest(param+".type", "The input item type %s is not supported; send message items with role \"user\", or function_call_output items.", quote(it.Type))
		}
		if len(in.texts) > 0 && len(in.outputs) > 0 {
			return input{}, badRequest(param, "Send function_call_output items on their own: they continue the previous response's turn; a message starts the next turn, so send it in a response of its own.")
		}
	}
	if len(in.outputs) > 0 {
		return in, nil
	}
	texts, err := checkTexts("input", in.texts)
	return input{texts: texts}, err
}

// messageTexts reads a message item's texts.
func messageTexts(param string, it inputItem) ([]string, error) {
	if it.Role != "user" {
		return nil, badRequest(param+".role", "Only user messages are accepted as input (got role %s); put a system or developer prompt in instructions.", quote(it.Role))
	}
	var s string
	if err := json.Unmarshal(it.Content, &s); err == nil {
		return []string{s}, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(it.Content, &parts); err != nil || len(parts) == 0 {
		return nil, badRequest(param+".content", "A message's content must be a string or a non-empty list of input_text parts.")
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		if p.Type != "input_text" {
			return nil, badRequest(fmt.Sprintf("%s.content[%d]", param, j), "The content type %s is not supported yet; use input_text.", quote(p.Type))
		}
		texts = append(texts, p.Text)
	}
	return texts, nil
}

// parseFunctionOutput reads a function_call_output item: a call_id and an
// output string (or a list of input_text parts, joined).
func parseFunctionOutput(param string, it inputItem) (functionOutput, error) {
	if it.CallID == nil || *it.CallID == "" || len(*it.CallID) > maxCallIDLen || strings.ContainsRune(*it.CallID, 0) {
		return functionOutput{}, badRequest(param+".call_id", "A function_call_output needs the call_id of the function call it answers (1 to %d characters).", maxCallIDLen)
	}
	out := functionOutput{CallID: *it.CallID}
	if err := json.Unmarshal(it.Output, &out.Output); err != nil || len(it.Output) == 0 {
		var parts []contentPart
		if err := json.Unmarshal(it.Output, &parts); err != nil || len(parts) == 0 {
			return functionOutput{}, badRequest(param+".output", "A function_call_output's output must be a string or a non-empty list of input_text parts.")
		}
		var b strings.Builder
		for j, p := range parts {
			if p.Type != "input_text" {
				return functionOutput{}, badRequest(fmt.Sprintf("%s.output[%d]", param, j), "The output content type %s is not supported; use input_text.", quote(p.Type))
			}
			b.WriteString(p.Text)
		}
		out.Output = b.String()
	}
	if strings.ContainsRune(out.Output, 0) {
		return functionOutput{}, badRequest(param+".output", "A function_call_output's output must not contain NUL bytes.")
	}
	return out, nil
}

func checkTexts(param string, texts []string) ([]string, error) {
	for _, t := range texts {
		if strings.ContainsRune(t, 0) {
			return nil, badRequest(param, "input must not contain NUL bytes.")
		}
		if strings.TrimSpace(t) == "" {
			return nil, badRequest(param, "input must not be empty.")
		}
	}
	return texts, nil
}

// conversationID reads conversation: "conv_…" or {"id": "conv_…"}.
func conversationID(raw json.RawMessage) (string, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var obj struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.ID == "" {
		return "", false, badRequest("conversation", "conversation must be a conversation id or an object with its id.")
	}
	return obj.ID, true, nil
}

// wantsStream reads GET /v1/responses/{id}'s stream flag: ?stream=true (the
// Node and Python SDKs) or a JSON body {"stream": true} (the Go SDK sends
// one even on a GET).
func wantsStream(r *http.Request) (bool, error) {
	switch r.URL.Query().Get("stream") {
	case "true":
		return true, nil
	case "", "false":
	default:
		return false, badRequest("stream", "stream must be true or false.")
	}
	if r.ContentLength == 0 {
		return false, nil
	}
	var body struct {
		Stream bool `json:"stream"`
	}
	if err := decodeBody(r, &body); err != nil {
		return false, err
	}
	return body.Stream, nil
}
