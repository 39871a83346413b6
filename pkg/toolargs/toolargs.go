// Package toolargs checks a model's tool-call input before a tool runs. A
// model that writes {"path": "a", "path": "b"} or {"Path": "a"} for a schema
// property "path" is ambiguous: decoders disagree on which value wins (Go's
// encoding/json matches keys case-insensitively and keeps the last), so the
// call is rejected with an error result instead of guessing.
package toolargs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Check returns a sentence for the model when args is not a JSON object, or
// repeats a key at any depth, or spells a top-level property of schema (a
// JSON schema object with "properties") with different capitalization.
func Check(args, schema json.RawMessage) error {
	if len(bytes.TrimSpace(args)) == 0 {
		return nil // no arguments
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("the tool call arguments are not valid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("the tool call arguments must be a JSON object")
	}
	keys, err := walkObject(dec, "")
	if err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the tool call arguments have data after the JSON object")
	}
	return checkCase(keys, schema)
}

// walkObject reads an object's members after its '{' and reports repeated
// keys at any depth; it returns the object's own keys.
func walkObject(dec *json.Decoder, path string) ([]string, error) {
	seen := map[string]bool{}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("the tool call arguments are not valid JSON: %v", err)
		}
		key := tok.(string)
		if seen[key] {
			return nil, fmt.Errorf("the tool call arguments repeat the key %q%s; send each key once", key, where(path))
		}
		seen[key] = true
		keys = append(keys, key)
		if err := walkValue(dec, path+"."+key); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, fmt.Errorf("the tool call arguments are not valid JSON: %v", err)
	}
	return keys, nil
}

func walkValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("the tool call arguments are not valid JSON: %v", err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		_, err := walkObject(dec, path)
		return err
	case '[':
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

func where(path string) string {
	if path == "" {
		return ""
	}
	return " in " + strings.TrimPrefix(path, ".")
}

// checkCase rejects a key that matches a schema property only when case is
// ignored.
func checkCase(keys []string, schema json.RawMessage) error {
	if len(schema) == 0 {
		return nil
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(schema, &s); err != nil || len(s.Properties) == 0 {
		return nil
	}
	for _, k := range keys {
		if _, exact := s.Properties[k]; exact {
			continue
		}
		for p := range s.Properties {
			if strings.EqualFold(p, k) {
				return fmt.Errorf("the tool call argument %q should be spelled %q, as the tool's schema names it", k, p)
			}
		}
	}
	return nil
}
