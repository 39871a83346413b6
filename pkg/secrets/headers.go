package secrets

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
)

// SealHeaders encrypts every value of headers (a JSON object of strings,
// chat_mcp_servers.headers of server id) for its own header name. The
// names stay readable: the api lists them.
func (k *Keyring) SealHeaders(headers json.RawMessage, id uuid.UUID) (json.RawMessage, error) {
	return k.mapHeaders(headers, id, k.Seal)
}

// OpenHeaders decrypts every value of stored headers of server id.
func (k *Keyring) OpenHeaders(headers json.RawMessage, id uuid.UUID) (json.RawMessage, error) {
	return k.mapHeaders(headers, id, k.Open)
}

func (k *Keyring) mapHeaders(headers json.RawMessage, id uuid.UUID, fn func(string, Field) (string, error)) (json.RawMessage, error) {
	if len(headers) == 0 {
		return headers, nil
	}
	var m map[string]string
	if err := json.Unmarshal(headers, &m); err != nil {
		return nil, fmt.Errorf("the headers of MCP server %s are not a JSON object of strings", id)
	}
	for name, v := range m {
		out, err := fn(v, MCPHeader(id, name))
		if err != nil {
			return nil, err
		}
		m[name] = out
	}
	return json.Marshal(m)
}

// headerValues returns the values of a headers object; nil when it is not
// a JSON object of strings.
func headerValues(headers json.RawMessage) map[string]string {
	var m map[string]string
	if len(headers) == 0 || json.Unmarshal(headers, &m) != nil {
		return nil
	}
	return m
}
