// Command openapimerge adds the paths and definitions of a hand-written
// OpenAPI (Swagger 2.0) fragment to a generated document, keeping the
// document's own order and adding the fragment's entries after it, so
// `make proto` stays reproducible. scripts/buf-generate.sh runs it to
// document the REST endpoints that are plain HTTP handlers rather than
// gRPC methods (uploads and downloads, /api/v2/files). A path the document
// already has is an error; a definition it already has (the error body)
// keeps the document's.
//
// Usage: openapimerge <document.json> <fragment.json>  (rewrites the document)
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: openapimerge <document.json> <fragment.json>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "openapimerge:", err)
		os.Exit(1)
	}
}

func run(docPath, fragPath string) error {
	doc, err := readObject(docPath)
	if err != nil {
		return err
	}
	frag, err := readObject(fragPath)
	if err != nil {
		return err
	}
	for _, section := range []string{"paths", "definitions"} {
		add, ok := frag.get(section)
		if !ok {
			continue
		}
		extra, err := parseObject(add)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", fragPath, section, err)
		}
		cur, ok := doc.get(section)
		if !ok {
			cur = []byte("{}")
		}
		base, err := parseObject(cur)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", docPath, section, err)
		}
		for _, kv := range extra {
			if _, dup := base.get(kv.key); dup {
				if section == "definitions" {
					continue // a shared definition (the error body): the document's wins
				}
				return fmt.Errorf("%s %q is in both %s and %s", section, kv.key, docPath, fragPath)
			}
			base = append(base, kv)
		}
		doc = doc.set(section, base.marshal())
	}
	var out bytes.Buffer
	if err := json.Indent(&out, doc.marshal(), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	return os.WriteFile(docPath, out.Bytes(), 0o644)
}

// object is a JSON object's members in their order.
type object []member

type member struct {
	key   string
	value json.RawMessage
}

func (o object) get(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.key == key {
			return m.value, true
		}
	}
	return nil, false
}

func (o object) set(key string, v json.RawMessage) object {
	for i, m := range o {
		if m.key == key {
			o[i].value = v
			return o
		}
	}
	return append(o, member{key, v})
}

func (o object) marshal() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func readObject(path string) (object, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	o, err := parseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return o, nil
}

// parseObject reads a JSON object's members in order.
func parseObject(raw []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var o object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o = append(o, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return o, nil
}
