package openaiapi

import (
	"encoding/json"
	"fmt"
)

// streamEvent is one event of a response's stream as the journal
// (openai_response_events) keeps it and the client receives it: its type
// and its fields but type and sequence_number, as a JSON object.
type streamEvent struct {
	Type string
	Data json.RawMessage
}

// newEvent encodes an event's fields.
func newEvent(typ string, fields map[string]any) streamEvent {
	data, err := json.Marshal(fields)
	if err != nil {
		// Only maps of JSON values are encoded here.
		panic(fmt.Sprintf("openaiapi: encode %s: %v", typ, err))
	}
	return streamEvent{Type: typ, Data: data}
}

// Item kinds: the type of an output item.
const (
	kindMessage      = "message"
	kindReasoning    = "reasoning"
	kindFunctionCall = "function_call"
)

// deltaType is the type of the events that stream an item's text.
func deltaType(kind string) string {
	switch kind {
	case kindReasoning:
		return "response.reasoning_summary_text.delta"
	case kindFunctionCall:
		return "response.function_call_arguments.delta"
	}
	return "response.output_text.delta"
}

// finalType is the type of the event that ends a stream whose response has
// status.
func finalType(status string) string {
	switch status {
	case "completed":
		return "response.completed"
	case "failed":
		return "response.failed"
	}
	return "response.incomplete" // cancelled, incomplete
}

// foldState is what a stream's journal says so far: how many events it
// holds, how the response started, each output item's text and whether it
// is closed, and whether the final event is there. Every event is applied
// to it in order (apply), whoever wrote it.
type foldState struct {
	n     int
	start string // the second event's status: "queued" or "in_progress"
	// started: a response.in_progress came after response.queued.
	started bool
	items   []streamItem
	final   bool
}

// streamItem is one output item of the stream.
type streamItem struct {
	id   string
	kind string
	text []byte
	open bool
	// status is the status its response.output_item.done gave it:
	// "completed", or "incomplete" for the item of a model attempt that
	// ended without committing it.
	status string
}

// eventShape is what apply reads of an event's fields.
type eventShape struct {
	OutputIndex *int   `json:"output_index"`
	Delta       string `json:"delta"`
	Item        *struct {
		ID     string `json:"id"`
		Type   string `json:"type"`
		Status string `json:"status"`
	} `json:"item"`
}

// apply adds one event of the journal to the state.
func (s *foldState) apply(e streamEvent) error {
	switch e.Type {
	case "response.created":
	case "response.queued":
		if s.start == "" {
			s.start = "queued"
		}
	case "response.in_progress":
		if s.start == "" {
			s.start = "in_progress"
		} else {
			s.started = true
		}
	case "response.completed", "response.failed", "response.incomplete":
		s.final = true
	case "response.output_item.added", "response.output_item.done",
		deltaType(kindMessage), deltaType(kindReasoning), deltaType(kindFunctionCall):
		if err := s.applyItem(e); err != nil {
			return fmt.Errorf("event %d (%s): %w", s.n, e.Type, err)
		}
	}
	s.n++
	return nil
}

func (s *foldState) applyItem(e streamEvent) error {
	var f eventShape
	if err := json.Unmarshal(e.Data, &f); err != nil {
		return err
	}
	if f.OutputIndex == nil {
		return fmt.Errorf("no output_index")
	}
	i := *f.OutputIndex
	if e.Type == "response.output_item.added" {
		if i != len(s.items) || f.Item == nil {
			return fmt.Errorf("item %d added after %d items", i, len(s.items))
		}
		s.items = append(s.items, streamItem{id: f.Item.ID, kind: f.Item.Type, open: true})
		return nil
	}
	if i < 0 || i >= len(s.items) || !s.items[i].open {
		return fmt.Errorf("output_index %d is no open item", i)
	}
	if e.Type == "response.output_item.done" {
		if f.Item == nil {
			return fmt.Errorf("no item")
		}
		s.items[i].open, s.items[i].status = false, f.Item.Status
		return nil
	}
	s.items[i].text = append(s.items[i].text, f.Delta...)
	return nil
}

// The fields of each event of an output item (OpenAI's shapes): an item
// is opened (output_item.added and its part's added), streamed (deltas)
// and closed (its text's done, its part's done, output_item.done). Messages
// and reasoning items have one part: content_index and summary_index are
// always 0.

func itemRef(index int, id string, extra map[string]any) map[string]any {
	f := map[string]any{"output_index": index, "item_id": id}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

func textPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func summaryTextPart(text string) map[string]any {
	return map[string]any{"type": "summary_text", "text": text}
}

// openEvents open item id of kind at index; stored is the stored item
// (function calls carry their call_id and name from it; an item of any
// other kind is shown whole, with no deltas).
func openEvents(index int, id, kind string, stored map[string]any) []streamEvent {
	switch kind {
	case kindMessage:
		item := map[string]any{"id": id, "type": kind, "status": "in_progress", "role": "assistant", "content": []any{}}
		return []streamEvent{
			newEvent("response.output_item.added", map[string]any{"output_index": index, "item": item}),
			newEvent("response.content_part.added", itemRef(index, id, map[string]any{"content_index": 0, "part": textPart("")})),
		}
	case kindReasoning:
		item := map[string]any{"id": id, "type": kind, "status": "in_progress", "summary": []any{}}
		return []streamEvent{
			newEvent("response.output_item.added", map[string]any{"output_index": index, "item": item}),
			newEvent("response.reasoning_summary_part.added", itemRef(index, id, map[string]any{"summary_index": 0, "part": summaryTextPart("")})),
		}
	}
	item := clone(stored)
	item["id"], item["status"] = id, "in_progress"
	if kind == kindFunctionCall {
		item["arguments"] = ""
	}
	return []streamEvent{newEvent("response.output_item.added", map[string]any{"output_index": index, "item": item})}
}

// deltaEvent streams more of an item's text.
func deltaEvent(index int, id, kind, delta string) streamEvent {
	switch kind {
	case kindMessage:
		return newEvent(deltaType(kind), itemRef(index, id, map[string]any{"content_index": 0, "delta": delta, "logprobs": []any{}}))
	case kindReasoning:
		return newEvent(deltaType(kind), itemRef(index, id, map[string]any{"summary_index": 0, "delta": delta}))
	}
	return newEvent(deltaType(kind), itemRef(index, id, map[string]any{"delta": delta}))
}

// closeEvents close item id with its whole text and status; stored, when
// set, is the stored item it is (its other fields are kept, its id is the
// stream's).
func closeEvents(index int, id, kind, text, status string, stored map[string]any) []streamEvent {
	item := clone(stored)
	item["id"], item["type"], item["status"] = id, kind, status
	switch kind {
	case kindMessage:
		item["role"] = "assistant"
		item["content"] = []any{textPart(text)}
		return []streamEvent{
			newEvent("response.output_text.done", itemRef(index, id, map[string]any{"content_index": 0, "text": text, "logprobs": []any{}})),
			newEvent("response.content_part.done", itemRef(index, id, map[string]any{"content_index": 0, "part": textPart(text)})),
			newEvent("response.output_item.done", map[string]any{"output_index": index, "item": item}),
		}
	case kindReasoning:
		item["summary"] = []any{summaryTextPart(text)}
		return []streamEvent{
			newEvent("response.reasoning_summary_text.done", itemRef(index, id, map[string]any{"summary_index": 0, "text": text})),
			newEvent("response.reasoning_summary_part.done", itemRef(index, id, map[string]any{"summary_index": 0, "part": summaryTextPart(text)})),
			newEvent("response.output_item.done", map[string]any{"output_index": index, "item": item}),
		}
	}
	if kind != kindFunctionCall {
		return []streamEvent{newEvent("response.output_item.done", map[string]any{"output_index": index, "item": item})}
	}
	item["arguments"] = text
	return []streamEvent{
		newEvent("response.function_call_arguments.done", itemRef(index, id, map[string]any{"arguments": text, "name": item["name"]})),
		newEvent("response.output_item.done", map[string]any{"output_index": index, "item": item}),
	}
}

// clone is a shallow copy of m (an empty map for nil).
func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+4)
	for k, v := range m {
		out[k] = v
	}
	return out
}
