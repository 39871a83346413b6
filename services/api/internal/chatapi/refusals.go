package chatapi

import (
	"fmt"

	"github.com/chatd/chatd/pkg/chatstate"
)

// refusal turns a refused transition into the reason and the sentence a
// person reads; the state machine's own words go to the error's detail.
func refusal(te *chatstate.TransitionError) (reason, msg string) {
	switch te.State {
	case chatstate.XW, chatstate.XE0, chatstate.XE1:
		if te.Transition == chatstate.SetArchivedTrue {
			return ReasonChatArchived, "This chat is already archived."
		}
		return ReasonChatArchived, "This chat is archived: unarchive it first."
	case chatstate.Invalid:
		return ReasonChatInvalidState, "This chat is in an invalid state: POST /api/v2/chats/{chat}/reconcile-invalid repairs it."
	}
	return ReasonTransitionNotAllowed, fmt.Sprintf("This chat is %s, so %s.", statePhrase(te.State), consequence(te.Transition))
}

// statePhrase names a state as a person would.
func statePhrase(s chatstate.State) string {
	switch s {
	case chatstate.W:
		return "waiting"
	case chatstate.E0, chatstate.E1:
		return "stopped on an error"
	case chatstate.R0, chatstate.R1:
		return "running a turn"
	case chatstate.I0, chatstate.I1:
		return "being interrupted"
	case chatstate.A0, chatstate.A1:
		return "waiting for tool results"
	}
	return "busy"
}

// consequence says what a refused transition means for the caller.
func consequence(t chatstate.Transition) string {
	switch t {
	case chatstate.Interrupt:
		return "there is nothing to interrupt"
	case chatstate.SendMessageQueue, chatstate.SendMessageInterrupt:
		return "it cannot take a message now"
	case chatstate.EditMessage:
		return "its messages cannot be edited now"
	case chatstate.DeleteQueuedMessage, chatstate.PromoteQueuedMessage:
		return "its queue cannot be changed now"
	case chatstate.CompleteRequiresAction:
		return "it is not waiting for tool results"
	case chatstate.RequestCompaction:
		return "it cannot be compacted now"
	case chatstate.ClearContext:
		return "its context cannot be cleared now"
	case chatstate.SetArchivedFalse:
		return "it is not archived"
	case chatstate.ReconcileInvalidState:
		return "there is nothing to repair"
	}
	return "the request cannot be applied now"
}
