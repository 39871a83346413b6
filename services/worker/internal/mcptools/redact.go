package mcptools

import (
	"encoding/json"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
)

// serverSecrets are the credentials configured for srv: its bearer token
// and its header values. They are scrubbed from every text a tool result
// or a log line takes from the server, which may echo them (an auth
// failure repeating the token it was sent).
func serverSecrets(srv queries.ChatMcpServer) []string {
	secrets := []string{srv.BearerToken}
	var headers map[string]string
	if len(srv.Headers) > 0 && json.Unmarshal(srv.Headers, &headers) == nil {
		for _, v := range headers {
			// A short value ("1", "yes") is no credential and scrubbing it
			// would mangle the text.
			if len(v) >= 8 {
				secrets = append(secrets, v)
			}
		}
	}
	return secrets
}

// scrub is text with srv's credentials replaced.
func scrub(srv queries.ChatMcpServer, text string) string {
	return llm.ScrubString(text, serverSecrets(srv)...)
}
