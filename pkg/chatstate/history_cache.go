package chatstate

import (
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
)

// DefaultHistoryCacheBytes is the worker's HistoryCache budget: the
// content and usage bytes of the rows it keeps.
const DefaultHistoryCacheBytes = 64 << 20

// historyRowOverhead is what a cached row costs beyond its content and
// usage bytes (the struct, its other fields' buffers), for the budget.
const historyRowOverhead = 256

// HistoryCache keeps each chat's active history as a bundle last read it,
// with the history_version it was read at, so that the next bundle on the
// chat reads only what changed since: every step decision of a worker
// reads the whole active history under the chat's lock, and at a few
// hundred messages the rows' transfer and decoding would be most of the
// Acquire bundle (BenchmarkActiveMessages).
//
// It is exact, not a hint. Every write to chat_messages happens in a
// transition bundle, which advances the chat's snapshot_version before
// anything else, and the message trigger stamps the row's revision and the
// chat's history_version with it. So under the chat's lock, with
// history_version V committed: the rows with revision <= V are what a
// reader at V holds, the rows written since are exactly those with
// revision > V (deleted ones included), and a bundle that finds
// history_version still V reads nothing at all. Only a read made before
// the bundle moved the history itself is stored: a rolled-back bundle's
// snapshot_version is used again by the next one, so rows it wrote must
// never enter the cache under its version.
//
// The cache is bounded by the bytes of its rows, in two generations of
// half the budget each (as runner.PromptCache): the chats in use stay, idle
// ones age out. A Machine restored from a backup behind the cache's back
// (history_version moving backwards) is read in full when the cached
// version is ahead of the chat's, but a worker should still be restarted
// after a restore.
type HistoryCache struct {
	mu       sync.Mutex
	half     int
	cur, old map[uuid.UUID]historyEntry
	curBytes int
}

type historyEntry struct {
	version int64                 // the chat's history_version the rows are as of
	rows    []queries.ChatMessage // shared, never modified, clipped
	size    int
}

// NewHistoryCache returns a cache holding at most about maxBytes of rows
// (DefaultHistoryCacheBytes when not positive).
func NewHistoryCache(maxBytes int) *HistoryCache {
	if maxBytes <= 0 {
		maxBytes = DefaultHistoryCacheBytes
	}
	return &HistoryCache{half: max(maxBytes/2, 1), cur: map[uuid.UUID]historyEntry{}, old: map[uuid.UUID]historyEntry{}}
}

// get returns chat's entry, moving it to the newer generation.
func (c *HistoryCache) get(chat uuid.UUID) (historyEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.cur[chat]; ok {
		return e, true
	}
	e, ok := c.old[chat]
	if ok {
		delete(c.old, chat)
		c.putLocked(chat, e)
	}
	return e, ok
}

// put stores rows as chat's active history at version. rows must not be
// modified afterwards.
func (c *HistoryCache) put(chat uuid.UUID, version int64, rows []queries.ChatMessage) {
	size := 0
	for i := range rows {
		size += len(rows[i].Content) + len(rows[i].Usage) + historyRowOverhead
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.cur[chat]; ok {
		if prev.version > version {
			return // a newer reading landed first
		}
		delete(c.cur, chat)
		c.curBytes -= prev.size
	}
	delete(c.old, chat)
	if size > c.half {
		return // one chat larger than a generation is read in full
	}
	c.putLocked(chat, historyEntry{version: version, rows: slices.Clip(rows), size: size})
}

func (c *HistoryCache) putLocked(chat uuid.UUID, e historyEntry) {
	if c.curBytes+e.size > c.half {
		c.old, c.cur, c.curBytes = c.cur, map[uuid.UUID]historyEntry{}, 0
	}
	c.cur[chat] = e
	c.curBytes += e.size
}

// mergeHistory applies the rows changed since an active history was read
// (both sorted by ID) to it: a changed row replaces the row with its ID or
// joins the history, a deleted one leaves it. The result is new; neither
// input is modified.
func mergeHistory(active, changed []queries.ChatMessage) []queries.ChatMessage {
	out := make([]queries.ChatMessage, 0, len(active)+len(changed))
	i := 0
	for _, c := range changed {
		for i < len(active) && active[i].ID < c.ID {
			out = append(out, active[i])
			i++
		}
		if i < len(active) && active[i].ID == c.ID {
			i++
		}
		if !c.Deleted {
			out = append(out, c)
		}
	}
	return append(out, active[i:]...)
}
