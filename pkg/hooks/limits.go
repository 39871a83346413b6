package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/chatd/chatd/pkg/toolargs"
)

// Response limits, the reference parser's: over one, the dispatch fails
// closed as malformed with a reason naming the limit.
const (
	// MaxTextBytes bounds model_context and user_message (16 KiB, counted
	// in bytes of their UTF-8 text).
	MaxTextBytes = 16 << 10
	// MaxOverrideDepth bounds how deeply an input_override nests objects
	// and arrays (a scalar is depth 0, {} and [] depth 1).
	MaxOverrideDepth = 128
)

// checkTextLimit fails a model_context or user_message over MaxTextBytes.
func checkTextLimit(name, s string) error {
	if len(s) > MaxTextBytes {
		return fmt.Errorf("%s is %d bytes, over the %d-byte (16 KiB) limit", name, len(s), MaxTextBytes)
	}
	return nil
}

// checkDepth fails raw (valid JSON) when it nests objects and arrays more
// than MaxOverrideDepth levels.
func checkDepth(raw json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("input_override is not valid JSON: %v", err)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > MaxOverrideDepth {
				return fmt.Errorf("input_override nests more than %d levels, the limit", MaxOverrideDepth)
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// checkToolOverride checks a pre_tool_use input_override against the tool:
// its JSON type must be one the schema's top-level "type" allows — a JSON
// object when the schema names none, except for a client tool without a
// declared type, which may take any JSON (the client validates its input).
// An object override of a built-in tool must not spell a property with
// different capitalization (repeated keys are rejected for every response).
func checkToolOverride(override, schema json.RawMessage, clientTool bool) error {
	kind := jsonKind(override)
	allowed := schemaTypes(schema)
	switch {
	case len(allowed) == 0 && !clientTool:
		allowed = []string{"object"}
	case len(allowed) == 0:
		return nil
	}
	if !kindAllowed(kind, override, allowed) {
		return fmt.Errorf("input_override is a JSON %s, but the tool's input schema takes %s", kind, strings.Join(allowed, " or "))
	}
	if kind != "object" {
		return nil
	}
	if clientTool {
		schema = nil // the case check covers built-in tools only
	}
	if err := toolargs.Check(override, schema); err != nil {
		return fmt.Errorf("ambiguous or invalid input_override: %v", err)
	}
	return nil
}

// jsonKind names the JSON type of raw (valid JSON): object, array, string,
// number, boolean or null.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "null"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func kindAllowed(kind string, raw json.RawMessage, allowed []string) bool {
	for _, a := range allowed {
		switch {
		case a == kind:
			return true
		case a == "integer" && kind == "number" && !bytes.ContainsAny(raw, ".eE"):
			return true
		}
	}
	return false
}

// schemaTypes reads a JSON schema's top-level "type", a string or a list.
func schemaTypes(schema json.RawMessage) []string {
	if len(bytes.TrimSpace(schema)) == 0 {
		return nil
	}
	var s struct {
		Type json.RawMessage `json:"type"`
	}
	if json.Unmarshal(schema, &s) != nil || len(s.Type) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(s.Type, &many)
	return many
}
