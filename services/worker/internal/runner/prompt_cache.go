package runner

import (
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/db/queries"
)

// DefaultPromptCacheBytes is the worker's PromptCache budget: the raw
// content bytes of the messages whose parsed form it keeps.
const DefaultPromptCacheBytes = 64 << 20

// PromptCache keeps the model's view of committed messages (the content
// parsed, hook parts turned into what the model reads) by chat and
// message ID, for every runner of a worker: each step's prompt is built
// over the whole active history, and parsing it again costs about 4 µs
// per message, 1.5 ms at 400 messages, on the way to every turn's first
// token (BenchmarkFirstStepWork). With the cache a step parses only the
// messages it has not seen.
//
// An entry never goes stale: a committed message's content is never
// updated (only its deleted flag is, and deleted rows are not in the
// active history a prompt is built from). The cache is bounded by the raw
// content bytes its entries were parsed from, in two generations of half
// the budget each: when the newer fills up it becomes the older and the
// older is dropped, and an entry found in the older moves to the newer,
// so the histories of chats in use stay while idle ones age out.
type PromptCache struct {
	mu       sync.Mutex
	half     int // bytes per generation
	cur, old map[promptKey]promptEntry
	curBytes int
}

type promptKey struct {
	chat uuid.UUID
	id   int64
}

type promptEntry struct {
	parts chatmsg.Content // shared: never modified (clipped, so an append copies)
	size  int
}

// NewPromptCache returns a cache holding the parsed form of at most
// maxBytes of raw content (DefaultPromptCacheBytes when not positive).
func NewPromptCache(maxBytes int) *PromptCache {
	if maxBytes <= 0 {
		maxBytes = DefaultPromptCacheBytes
	}
	return &PromptCache{half: max(maxBytes/2, 1), cur: map[promptKey]promptEntry{}, old: map[promptKey]promptEntry{}}
}

// modelParts returns m's content as the model reads it (chatmsg
// Content.ForModel), parsed once per cache. The result is shared with
// other callers and must not be modified. A nil cache parses every time.
func (c *PromptCache) modelParts(m queries.ChatMessage) (chatmsg.Content, error) {
	if c == nil {
		return parseForModel(m.Content)
	}
	k := promptKey{chat: m.ChatID, id: m.ID}
	c.mu.Lock()
	e, ok := c.cur[k]
	if !ok {
		if e, ok = c.old[k]; ok {
			delete(c.old, k)
			c.put(k, e)
		}
	}
	c.mu.Unlock()
	if ok {
		return e.parts, nil
	}
	parts, err := parseForModel(m.Content)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.put(k, promptEntry{parts: parts, size: len(m.Content)})
	c.mu.Unlock()
	return parts, nil
}

// put adds e to the newer generation, turning the generations over when
// it is full; c.mu must be held.
func (c *PromptCache) put(k promptKey, e promptEntry) {
	if c.curBytes > 0 && c.curBytes+e.size > c.half {
		c.old, c.cur, c.curBytes = c.cur, make(map[promptKey]promptEntry, len(c.cur)), 0
	}
	c.cur[k] = e
	c.curBytes += e.size
}

// Len is how many messages the cache holds.
func (c *PromptCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}

func parseForModel(raw []byte) (chatmsg.Content, error) {
	content, err := chatmsg.ParseContent(raw)
	if err != nil {
		return nil, err
	}
	return slices.Clip(content.ForModel()), nil
}
