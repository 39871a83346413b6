package llm

import (
	"fmt"
	"iter"
	"slices"

	"github.com/chatd/chatd/pkg/chatmsg"
)

// Accumulator folds a response's events into the assistant message they
// describe. The zero value is ready to use.
type Accumulator struct {
	parts []chatmsg.Part
	// texts[i] is the text of parts[i] so far (text and reasoning parts):
	// appended to in place, so a long answer costs linear time, not a
	// copy of the text so far per delta.
	texts  [][]byte
	usage  Usage
	reason FinishReason
	done   bool
}

// Add folds ev in. It returns an error for an event that breaks the
// ordering contract (a part index skipping ahead, a delta for a part of
// another type, an event after finish).
func (a *Accumulator) Add(ev Event) error {
	if a.done {
		return fmt.Errorf("llm: %s event after finish", ev.Type)
	}
	switch ev.Type {
	case EventTextDelta, EventReasoningDelta:
		typ := chatmsg.PartText
		if ev.Type == EventReasoningDelta {
			typ = chatmsg.PartReasoning
		}
		switch {
		case ev.Part == len(a.parts):
			a.parts = append(a.parts, chatmsg.Part{Type: typ})
			a.texts = append(a.texts, nil)
		case ev.Part < 0 || ev.Part > len(a.parts):
			return fmt.Errorf("llm: %s for part %d, have %d parts", ev.Type, ev.Part, len(a.parts))
		case a.parts[ev.Part].Type != typ:
			return fmt.Errorf("llm: %s for part %d, a %s part", ev.Type, ev.Part, a.parts[ev.Part].Type)
		}
		a.texts[ev.Part] = append(a.texts[ev.Part], ev.Delta...)
	case EventToolCall:
		if ev.Part != len(a.parts) {
			return fmt.Errorf("llm: tool call as part %d, have %d parts", ev.Part, len(a.parts))
		}
		a.parts = append(a.parts, chatmsg.ToolCall(ev.ToolCall.ID, ev.ToolCall.Name, ev.ToolCall.Input))
		a.texts = append(a.texts, nil)
	case EventProgress:
		// Activity only: no content.
	case EventUsage:
		a.usage = ev.Usage
	case EventFinish:
		a.reason = ev.FinishReason
		a.done = true
	default:
		return fmt.Errorf("llm: unknown event type %q", ev.Type)
	}
	return nil
}

// Content is (a copy of) the message content so far.
func (a *Accumulator) Content() chatmsg.Content {
	out := slices.Clone(chatmsg.Content(a.parts))
	for i, t := range a.texts {
		if t != nil {
			out[i].Text = string(t)
		}
	}
	return out
}

// Usage is the reported usage, zero until a usage event.
func (a *Accumulator) Usage() Usage { return a.usage }

// FinishReason is the finish reason, empty until the finish event.
func (a *Accumulator) FinishReason() FinishReason { return a.reason }

// Finished reports whether the finish event has been added.
func (a *Accumulator) Finished() bool { return a.done }

// ToolCalls lists the tool calls so far.
func (a *Accumulator) ToolCalls() []ToolCall {
	var calls []ToolCall
	for _, p := range a.parts {
		if p.Type == chatmsg.PartToolCall {
			calls = append(calls, ToolCall{ID: p.ToolCallID, Name: p.ToolName, Input: p.Args})
		}
	}
	return calls
}

// Response is a whole response, as Collect gathers it.
type Response struct {
	Content      chatmsg.Content
	Usage        Usage
	FinishReason FinishReason
}

// Collect drains a stream into a Response. On error it returns what arrived
// before the error along with it.
func Collect(seq iter.Seq2[Event, error]) (Response, error) {
	var acc Accumulator
	var err error
	for ev, e := range seq {
		if e != nil {
			err = e
			break
		}
		if e := acc.Add(ev); e != nil {
			err = NewFatal(e)
			break
		}
	}
	return Response{Content: acc.Content(), Usage: acc.Usage(), FinishReason: acc.FinishReason()}, err
}
