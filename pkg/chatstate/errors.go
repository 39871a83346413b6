package chatstate

import (
	"errors"
	"fmt"
)

// Domain errors. Callers match them with errors.Is and map them to transport
// status codes once, at the edge.
var (
	// ErrNotAllowed: the transition is not allowed in the chat's state.
	ErrNotAllowed = errors.New("transition not allowed")
	// ErrChatNotFound: no chat has that ID.
	ErrChatNotFound = errors.New("chat not found")
	// ErrMessageNotFound: the chat has no such active message.
	ErrMessageNotFound = errors.New("message not found")
	// ErrQueuedMessageNotFound: the chat has no such queued message.
	ErrQueuedMessageNotFound = errors.New("queued message not found")
	// ErrInvalidArgument: the transition's input is malformed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrFamilyArchived: a child chat cannot join an archived family, and a
	// child cannot be unarchived while its parent is archived.
	ErrFamilyArchived = errors.New("chat family is archived")
	// ErrFenced: the chat moved on since the caller read it (history
	// version, status or runner changed); the caller's work is stale.
	ErrFenced = errors.New("chat changed since the work started")
	// ErrLandingMismatch: a transition's mutations did not land where the
	// table says. It is a bug; the bundle is rolled back.
	ErrLandingMismatch = errors.New("transition landed outside the allowed table")
)

// TransitionError reports a transition rejected in a state.
type TransitionError struct {
	Transition Transition
	State      State
	Ownership  Ownership
	// Detail explains the state when the shorthand alone would not.
	Detail string
}

func (e *TransitionError) Error() string {
	detail := e.Detail
	if detail == "" {
		detail = describe(e.State)
	}
	if detail != "" {
		return fmt.Sprintf("%s not allowed in %s (%s)", e.Transition, e.State, detail)
	}
	return fmt.Sprintf("%s not allowed in %s", e.Transition, e.State)
}

// Is makes errors.Is(err, ErrNotAllowed) true for every TransitionError.
func (e *TransitionError) Is(target error) bool { return target == ErrNotAllowed }

func describe(s State) string {
	switch s {
	case N:
		return "chat does not exist"
	case W:
		return "waiting"
	case E0, E1:
		return "error"
	case R0, R1:
		return "running"
	case I0, I1:
		return "interrupting"
	case A0, A1:
		return "requires action"
	case XW, XE0, XE1:
		return "archived"
	case Invalid:
		return "invalid state; reconcile it first"
	}
	return ""
}
