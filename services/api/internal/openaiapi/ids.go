package openaiapi

import (
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

// IDs on the surface are OpenAI-style prefixed strings over chatd's UUIDs:
// resp_<32 hex> is a response record, conv_<32 hex> is a chat.
const (
	responsePrefix     = "resp_"
	conversationPrefix = "conv_"
)

func formatID(prefix string, id uuid.UUID) string {
	return prefix + hex.EncodeToString(id[:])
}

// parseID reads a prefixed ID; ok is false for anything else (the caller
// answers 404, as for an unknown ID).
func parseID(prefix, s string) (uuid.UUID, bool) {
	rest, found := strings.CutPrefix(s, prefix)
	if !found || len(rest) != 32 {
		return uuid.UUID{}, false
	}
	var id uuid.UUID
	if _, err := hex.Decode(id[:], []byte(rest)); err != nil {
		return uuid.UUID{}, false
	}
	return id, true
}
