package auth

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Scope is a permission a token may be limited to (its scope claim).
type Scope string

// The scopes chatd knows.
const (
	// ScopeAll is the full API: every endpoint the token's user may use.
	ScopeAll Scope = "all"
	// ScopeModelConfigRead allows model discovery only (GET
	// /api/v2/organizations/{organization}/chats/models).
	ScopeModelConfigRead Scope = "chat_model_config:read"
)

// Scopes are the scopes chatd knows, for messages and flag help.
var Scopes = []Scope{ScopeAll, ScopeModelConfigRead}

// ParseScope returns the known scope named s.
func ParseScope(s string) (Scope, error) {
	if i := slices.Index(Scopes, Scope(s)); i >= 0 {
		return Scopes[i], nil
	}
	return "", fmt.Errorf("unknown scope %q (know %s)", s, scopeList())
}

func scopeList() string {
	names := make([]string, len(Scopes))
	for i, s := range Scopes {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Full reports whether the token has the full API scope: it lists
// ScopeAll, or none of chatd's scopes (the default: a token without a scope
// claim, or whose scope claim only names other systems' scopes such as
// "openid", is a full-scope token).
func (c Claims) Full() bool {
	return len(c.Scopes) == 0 || slices.Contains(c.Scopes, ScopeAll)
}

// Allows reports whether the token may do what s permits: it has the full
// scope, or s itself.
func (c Claims) Allows(s Scope) bool {
	return c.Full() || slices.Contains(c.Scopes, s)
}

// scopeClaim reads a scope claim: a space-separated string (RFC 8693,
// OAuth) or an array of strings. Only chatd's scopes are kept; others are
// other systems' and ignored.
func scopeClaim(raw json.RawMessage) ([]Scope, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var names []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		names = strings.Fields(one)
	} else if err := json.Unmarshal(raw, &names); err != nil {
		return nil, newError(ErrInvalidToken, "the bearer token's scope claim is neither a space-separated string nor a list of strings", err)
	}
	var out []Scope
	for _, n := range names {
		if s, err := ParseScope(n); err == nil && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}
