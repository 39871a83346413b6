// Command openapi-finish completes the OpenAPI document protoc-gen-openapiv2
// writes (pkg/gen/openapi/chatd.swagger.json) with what the generator cannot
// know:
//   - the paths and definitions of hand-written fragments, for the REST
//     endpoints that are plain HTTP handlers rather than gRPC methods
//     (uploads and downloads, proto/chatd/v1/files_openapi.json); a path
//     the document already has is an error, a definition it already has
//     keeps the document's;
//   - the error body every chatd HTTP endpoint answers with, instead of the
//     google.rpc.Status the generator assumes for grpc-gateway.
//
// It keeps the generator's key order and indentation, so the document's diff
// shows only what this step changed, and the output is byte-for-byte
// reproducible (make check-generated).
//
// Usage: openapi-finish <document.json> [fragment.json...]  (rewrites the document)
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: openapi-finish <document.json> [fragment.json...]")
		os.Exit(2)
	}
	if err := finish(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "openapi-finish: %v\n", err)
		os.Exit(1)
	}
}

func finish(path string, fragments []string) error {
	root, err := readObject(path)
	if err != nil {
		return err
	}
	for _, f := range fragments {
		frag, err := readObject(f)
		if err != nil {
			return err
		}
		if err := merge(root, frag); err != nil {
			return fmt.Errorf("merge %s into %s: %w", f, path, err)
		}
	}
	if err := useErrorBody(root); err != nil {
		return err
	}
	var out bytes.Buffer
	encode(&out, root, "")
	out.WriteByte('\n')
	return os.WriteFile(path, out.Bytes(), 0o644)
}

func readObject(path string) (*object, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := decode(json.NewDecoder(bytes.NewReader(raw)))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	o, ok := v.(*object)
	if !ok {
		return nil, fmt.Errorf("%s: the document is not a JSON object", path)
	}
	return o, nil
}

// merge adds frag's paths and definitions to doc, after doc's own.
func merge(doc, frag *object) error {
	for _, section := range []string{"paths", "definitions"} {
		extra, ok := frag.get(section).(*object)
		if !ok {
			continue
		}
		base, ok := doc.get(section).(*object)
		if !ok {
			base = &object{}
			doc.set(section, base)
		}
		for i, k := range extra.keys {
			if base.get(k) != nil {
				if section == "definitions" {
					continue // a shared definition (the error body): the document's wins
				}
				return fmt.Errorf("%s %q is in both", section, k)
			}
			base.set(k, extra.values[i])
		}
	}
	return nil
}

// errorDefinition is chatd's error body (pkg/httperror), the same on the
// REST facade, uploads, unknown routes and the stream.
const errorDefinition = `{
  "type": "object",
  "description": "The body of every error answer of every chatd HTTP endpoint.",
  "required": ["message", "code", "reason"],
  "properties": {
    "message": {
      "type": "string",
      "description": "A plain sentence for a person, safe to show to the chat's user."
    },
    "code": {
      "type": "string",
      "description": "The gRPC status code's canonical name in lower snake case.",
      "enum": ["cancelled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists", "permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated"]
    },
    "reason": {
      "type": "string",
      "description": "A stable UPPER_SNAKE word to branch on (CHAT_NOT_FOUND, CHAT_ARCHIVED, QUEUE_FULL, TRANSITION_NOT_ALLOWED, ...); the code in upper case when nothing more specific applies."
    },
    "detail": {
      "type": "string",
      "description": "For developers, when present: the state machine's words (Interrupt not allowed in W (waiting))."
    }
  }
}`

// useErrorBody points every response that names google.rpc.Status at the
// Error definition, adds it, and drops Status (and Any, which only Status
// used) when nothing else refers to them.
func useErrorBody(root *object) error {
	defsNode, ok := root.get("definitions").(*object)
	if !ok {
		return fmt.Errorf("the document has no definitions")
	}
	errDef, err := decode(json.NewDecoder(bytes.NewReader([]byte(errorDefinition))))
	if err != nil {
		return fmt.Errorf("error definition: %w", err)
	}
	replaced := 0
	walk(root, func(o *object) {
		if ref, ok := o.get("$ref").(string); ok && ref == "#/definitions/Status" {
			o.set("$ref", "#/definitions/Error")
			replaced++
		}
	})
	// walk visits a response before its schema, so descriptions are fixed
	// in a second pass, once every schema names Error.
	walk(root, func(o *object) {
		if d, ok := o.get("description").(string); ok && d == "An unexpected error response." {
			if s, ok := o.get("schema").(*object); ok && s.get("$ref") == "#/definitions/Error" {
				o.set("description", "An error, in chatd's error body.")
			}
		}
	})
	if replaced == 0 {
		return fmt.Errorf("no response refers to google.rpc.Status: has the generator changed?")
	}
	defsNode.set("Error", errDef)
	for _, name := range []string{"Status", "Any"} {
		if !referenced(root, "#/definitions/"+name, name) {
			defsNode.remove(name)
		}
	}
	defsNode.sortKeys()
	return nil
}

// referenced reports whether any $ref outside the definition named self
// points at ref.
func referenced(root *object, ref, self string) bool {
	found := false
	defs, _ := root.get("definitions").(*object)
	for i, k := range root.keys {
		if k == "definitions" {
			continue
		}
		walk(root.values[i], func(o *object) {
			if o.get("$ref") == ref {
				found = true
			}
		})
	}
	for i, k := range defs.keys {
		if k == self {
			continue
		}
		walk(defs.values[i], func(o *object) {
			if o.get("$ref") == ref {
				found = true
			}
		})
	}
	return found
}

// object is a JSON object that keeps its keys' order.
type object struct {
	keys   []string
	values []any
}

func (o *object) get(k string) any {
	for i, key := range o.keys {
		if key == k {
			return o.values[i]
		}
	}
	return nil
}

func (o *object) set(k string, v any) {
	for i, key := range o.keys {
		if key == k {
			o.values[i] = v
			return
		}
	}
	o.keys = append(o.keys, k)
	o.values = append(o.values, v)
}

func (o *object) remove(k string) {
	for i, key := range o.keys {
		if key == k {
			o.keys = append(o.keys[:i], o.keys[i+1:]...)
			o.values = append(o.values[:i], o.values[i+1:]...)
			return
		}
	}
}

func (o *object) sortKeys() {
	idx := make([]int, len(o.keys))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return o.keys[idx[a]] < o.keys[idx[b]] })
	keys, values := make([]string, len(idx)), make([]any, len(idx))
	for i, j := range idx {
		keys[i], values[i] = o.keys[j], o.values[j]
	}
	o.keys, o.values = keys, values
}

// walk calls fn on every object in v, parents first.
func walk(v any, fn func(*object)) {
	switch t := v.(type) {
	case *object:
		fn(t)
		for _, c := range t.values {
			walk(c, fn)
		}
	case []any:
		for _, c := range t {
			walk(c, fn)
		}
	}
}

// decode reads one JSON value, objects as *object; numbers stay
// json.Number so they are written back exactly.
func decode(d *json.Decoder) (any, error) {
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				v, err := decode(d)
				if err != nil {
					return nil, err
				}
				o.keys = append(o.keys, kt.(string))
				o.values = append(o.values, v)
			}
			_, err := d.Token()
			return o, err
		case '[':
			a := []any{}
			for d.More() {
				v, err := decode(d)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// encode writes v as the generator does: two-space indent, "key": value.
func encode(w *bytes.Buffer, v any, indent string) {
	switch t := v.(type) {
	case *object:
		if len(t.keys) == 0 {
			w.WriteString("{}")
			return
		}
		w.WriteString("{\n")
		for i, k := range t.keys {
			w.WriteString(indent + "  ")
			writeScalar(w, k)
			w.WriteString(": ")
			encode(w, t.values[i], indent+"  ")
			if i < len(t.keys)-1 {
				w.WriteByte(',')
			}
			w.WriteByte('\n')
		}
		w.WriteString(indent + "}")
	case []any:
		if len(t) == 0 {
			w.WriteString("[]")
			return
		}
		w.WriteString("[\n")
		for i, c := range t {
			w.WriteString(indent + "  ")
			encode(w, c, indent+"  ")
			if i < len(t)-1 {
				w.WriteByte(',')
			}
			w.WriteByte('\n')
		}
		w.WriteString(indent + "]")
	default:
		writeScalar(w, t)
	}
}

func writeScalar(w *bytes.Buffer, v any) {
	var b bytes.Buffer
	// The generator escapes <, > and & (\u003c), as encoding/json does.
	_ = json.NewEncoder(&b).Encode(v)
	w.Write(bytes.TrimRight(b.Bytes(), "\n"))
}
