// Package chatstate is chatd's core state machine: the execution and
// ownership states of a chat, the allowed-transition table, and one function
// per transition. Every write to chats' execution state, chat_messages and
// chat_queued_messages goes through a transition applied here.
package chatstate

import "github.com/chatd/chatd/pkg/db/queries"

// Status is the chats.status column.
type Status = queries.ChatStatus

// The chat statuses.
const (
	StatusWaiting        = queries.ChatStatusWaiting
	StatusRunning        = queries.ChatStatusRunning
	StatusInterrupting   = queries.ChatStatusInterrupting
	StatusRequiresAction = queries.ChatStatusRequiresAction
	StatusError          = queries.ChatStatusError
)

// State is an execution state shorthand from the spec ("Execution states").
type State string

// The 13 execution states, and the class of rows that match none of them.
const (
	N       State = "N"
	W       State = "W"
	E0      State = "E0"
	E1      State = "E1"
	R0      State = "R0"
	R1      State = "R1"
	I0      State = "I0"
	I1      State = "I1"
	A0      State = "A0"
	A1      State = "A1"
	XW      State = "XW"
	XE0     State = "XE0"
	XE1     State = "XE1"
	Invalid State = "[Invalid]"
)

// States lists the 13 valid execution states, N first.
var States = []State{N, W, E0, E1, R0, R1, I0, I1, A0, A1, XW, XE0, XE1}

// Ownership is an ownership state shorthand: U (unowned) or O (owned).
type Ownership string

// The ownership states.
const (
	Unowned Ownership = "U"
	Owned   Ownership = "O"
)

// Classify maps a chat row and its queue length to its execution state. A
// combination the spec's table does not list (an archived running chat, a
// waiting chat with queued messages, ...) is Invalid.
func Classify(exists bool, status Status, archived bool, queueLen int64) State {
	if !exists {
		return N
	}
	queued := queueLen > 0
	if archived {
		switch {
		case status == StatusWaiting && !queued:
			return XW
		case status == StatusError && !queued:
			return XE0
		case status == StatusError && queued:
			return XE1
		}
		return Invalid
	}
	pick := func(empty, nonEmpty State) State {
		if queued {
			return nonEmpty
		}
		return empty
	}
	switch status {
	case StatusWaiting:
		if queued {
			return Invalid
		}
		return W
	case StatusError:
		return pick(E0, E1)
	case StatusRunning:
		return pick(R0, R1)
	case StatusInterrupting:
		return pick(I0, I1)
	case StatusRequiresAction:
		return pick(A0, A1)
	}
	return Invalid
}

// Runnable reports whether a worker should be processing a chat in state s
// (the acquisition loop's R0 R1 I0 I1 A0 A1).
func (s State) Runnable() bool {
	switch s {
	case R0, R1, I0, I1, A0, A1:
		return true
	}
	return false
}

// ClassifyOwnership maps worker_id's nullness to U or O.
func ClassifyOwnership(hasWorker bool) Ownership {
	if hasWorker {
		return Owned
	}
	return Unowned
}
