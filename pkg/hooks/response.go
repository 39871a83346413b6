package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/chatd/chatd/pkg/agenthooks"
)

// ParseResponse parses a consumer's 2xx body for ev and applies the
// permission rules and limits. An empty body or {} is a no-op. Otherwise the
// body must be one JSON object with no unknown fields (names match exactly),
// no duplicate keys at any depth and no trailing data; model_context and
// user_message hold at most MaxTextBytes; permission is allowed only on
// user_prompt_submit and pre_tool_use, where allow requires an
// input_override (exactly {"prompt": "<text>"} for a prompt; for a tool
// call, JSON of a type the tool's schema takes, see checkToolOverride),
// nested at most MaxOverrideDepth levels, and deny forbids one. A JSON null
// counts as an absent field.
func ParseResponse(ev Event, body []byte) (agenthooks.Response, error) {
	typ := ev.Type
	var resp agenthooks.Response
	if len(bytes.TrimSpace(body)) == 0 {
		return resp, nil
	}
	if err := checkStrictJSON(body); err != nil {
		return resp, err
	}
	top, err := fields(body, "response", "permission", "model_context", "user_message")
	if err != nil {
		return resp, err
	}
	if resp.ModelContext, err = stringField(top, "model_context"); err != nil {
		return resp, err
	}
	if resp.UserMessage, err = stringField(top, "user_message"); err != nil {
		return resp, err
	}
	if err := checkTextLimit("model_context", resp.ModelContext); err != nil {
		return resp, err
	}
	if err := checkTextLimit("user_message", resp.UserMessage); err != nil {
		return resp, err
	}
	rawPerm, ok := top["permission"]
	if !ok {
		return resp, nil
	}
	if !typ.AcceptsPermission() {
		return resp, fmt.Errorf("permission is not allowed on %s", typ)
	}
	perm, err := fields(rawPerm, "permission", "decision", "reason", "input_override")
	if err != nil {
		return resp, err
	}
	p := &agenthooks.Permission{}
	decision, err := stringField(perm, "decision")
	if err != nil {
		return resp, err
	}
	p.Decision = agenthooks.PermissionDecision(decision)
	if p.Reason, err = stringField(perm, "reason"); err != nil {
		return resp, err
	}
	p.InputOverride = perm["input_override"]
	switch p.Decision {
	case agenthooks.PermissionDeny:
		if p.InputOverride != nil {
			return resp, errors.New("a deny decision must not carry input_override")
		}
	case agenthooks.PermissionAllow:
		if p.InputOverride == nil {
			return resp, fmt.Errorf("an allow decision on %s requires input_override", typ)
		}
		if err := checkDepth(p.InputOverride); err != nil {
			return resp, err
		}
		if typ == agenthooks.EventUserPromptSubmit {
			o, err := fields(p.InputOverride, "input_override", "prompt")
			if err != nil {
				return resp, err
			}
			if _, ok := o["prompt"]; !ok {
				return resp, errors.New(`input_override of user_prompt_submit must be exactly {"prompt": "<text>"}`)
			}
			if _, err := stringField(o, "prompt"); err != nil {
				return resp, err
			}
		} else if err := checkToolOverride(p.InputOverride, ev.ToolSchema, ev.ClientTool); err != nil {
			return resp, err
		}
	default:
		return resp, fmt.Errorf("permission.decision %q is neither allow nor deny", decision)
	}
	resp.Permission = p
	return resp, nil
}

// PromptOverride returns the replacement prompt of a response that allowed
// a user_prompt_submit (ParseResponse has checked its form).
func PromptOverride(r agenthooks.Response) (string, bool) {
	if r.Permission == nil || r.Permission.Decision != agenthooks.PermissionAllow {
		return "", false
	}
	var o agenthooks.PromptOverride
	if err := json.Unmarshal(r.Permission.InputOverride, &o); err != nil {
		return "", false
	}
	return o.Prompt, true
}

// Denied reports whether r denies the prompt or tool call.
func Denied(r agenthooks.Response) bool {
	return r.Permission != nil && r.Permission.Decision == agenthooks.PermissionDeny
}

// fields decodes raw, which must be a JSON object whose keys are all in
// allowed (compared exactly), into its members; null members are dropped.
func fields(raw json.RawMessage, what string, allowed ...string) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("%s must be a JSON object", what)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	for k, v := range m {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			return nil, fmt.Errorf("%s has an unknown field %q", what, k)
		}
		if string(bytes.TrimSpace(v)) == "null" {
			delete(m, k)
		}
	}
	return m, nil
}

func stringField(m map[string]json.RawMessage, key string) (string, error) {
	raw, ok := m[key]
	if !ok {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s must be a string", key)
	}
	return s, nil
}

// checkStrictJSON reports invalid JSON, a repeated key in any object, or
// data after the first value.
func checkStrictJSON(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := walk(dec, ""); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the response has data after the JSON value")
	}
	return nil
}

func walk(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("the response is not valid JSON: %v", err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return fmt.Errorf("the response is not valid JSON: %v", err)
			}
			key, _ := tok.(string)
			if seen[key] {
				return fmt.Errorf("the response repeats the key %q%s", key, pathSuffix(path))
			}
			seen[key] = true
			if err := walk(dec, path+"."+key); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := walk(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return fmt.Errorf("the response is not valid JSON: %v", err)
	}
	return nil
}

func pathSuffix(path string) string {
	if path == "" {
		return ""
	}
	return " in " + path[1:]
}
