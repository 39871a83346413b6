package chatapi

import (
	"encoding/base64"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Page sizes of the lists taking page_size and page_token (chats,
// projects, providers, model configs, MCP servers).
const (
	defaultPageSize = 50
	maxPageSize     = 200
)

// Page sizes of ListMessages: a page is one screen of history or more, and a
// client showing a whole chat pages through it.
const (
	defaultMessagePageSize = 200
	maxMessagePageSize     = 1000
)

// pageSize applies a list's page_size rules: 0 is def, 1..max as given,
// anything else a sentence.
func pageSize(got, def, max int32) (int32, error) {
	switch {
	case got < 0 || got > max:
		return 0, invalid("page_size must be between 1 and %d", max)
	case got == 0:
		return def, nil
	}
	return got, nil
}

// badPageToken is the answer to a page_token this server did not issue.
func badPageToken() error {
	return invalid("page_token is not one this server issued; start again without it")
}

// encodePageToken is the keyset token of a list ordered by (created_at, id).
func encodePageToken(at time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id.String()))
}

func decodePageToken(tok string) (time.Time, uuid.UUID, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return time.Time{}, uuid.Nil, badPageToken()
	}
	at, id, ok := strings.Cut(string(raw), "|")
	if !ok {
		return time.Time{}, uuid.Nil, badPageToken()
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}, uuid.Nil, badPageToken()
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return time.Time{}, uuid.Nil, badPageToken()
	}
	return t, u, nil
}

// encodeNameToken is the keyset token of a list ordered by a unique name.
func encodeNameToken(name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("name|" + name))
}

func decodeNameToken(tok string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", badPageToken()
	}
	name, ok := strings.CutPrefix(string(raw), "name|")
	if !ok || name == "" {
		return "", badPageToken()
	}
	return name, nil
}

// pageAfterKey pages a list already in (created_at, id) order that is read
// whole (the deployment's providers and an organization's model configs
// come from pkg/modelconfig, which serves the worker too): the items after
// the token's key, at most size of them, and the next page's token.
func pageAfterKey[T any](items []T, key func(T) (time.Time, uuid.UUID), size int32, token string) ([]T, string, error) {
	start := 0
	if token != "" {
		at, id, err := decodePageToken(token)
		if err != nil {
			return nil, "", err
		}
		start = len(items)
		for i, it := range items {
			if k, kid := key(it); keyAfter(k, kid, at, id) {
				start = i
				break
			}
		}
	}
	items = items[start:]
	if len(items) <= int(size) {
		return items, "", nil
	}
	items = items[:size]
	at, id := key(items[len(items)-1])
	return items, encodePageToken(at, id), nil
}

// keyAfter reports whether (at, id) sorts after (at0, id0) in the
// (created_at, id) order Postgres uses (uuid bytes compare as the text).
func keyAfter(at time.Time, id uuid.UUID, at0 time.Time, id0 uuid.UUID) bool {
	if !at.Equal(at0) {
		return at.After(at0)
	}
	return strings.Compare(id.String(), id0.String()) > 0
}
