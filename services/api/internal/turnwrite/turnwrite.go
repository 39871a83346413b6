// Package turnwrite is what an in-process caller of ChatService adds to
// the bundle that starts or continues a turn (creating a chat with a
// prompt, sending a message, submitting tool results): the chat's client
// tools from that turn on, and one more write that commits with the
// turn's messages or not at all. The OpenAI-compatible surface records its
// response this way, so a response ID exists exactly when its turn does.
package turnwrite

import (
	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// Turn is what the bundle knows of the turn before it commits.
type Turn struct {
	ChatID uuid.UUID
	// MessageID is the history message that starts the turn (the user
	// message) or continues it (the message of submitted tool results);
	// nil when the message was queued behind a running turn.
	MessageID *int64
	// QueuedMessageID is the queued message, when the chat was busy.
	QueuedMessageID *int64
}

// Options are the additions to one bundle; the zero value adds nothing.
type Options struct {
	// ReplaceTools replaces the chat's client (dynamic) tools with
	// DynamicTools in the bundle, when they differ. A send that would
	// queue behind a running turn cannot change them: the running turn
	// would see the change (FailedPrecondition).
	ReplaceTools bool
	DynamicTools []*chatdv1.DynamicTool
	// Record, when set, is called in the bundle once the turn's message
	// is known; the write it returns — one call of a generated query
	// (queries.Pipeline's rules) that reports its error — goes with the
	// bundle's COMMIT, and its failure fails the whole bundle. A request
	// answered from its request_id (a replay) runs no bundle and calls
	// nothing.
	Record func(Turn) func(*queries.Queries) error
}
