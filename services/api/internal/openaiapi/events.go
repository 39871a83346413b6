package openaiapi

// event is one stream event: its type and its fields (sequence_number is
// added when it is written).
type event struct {
	Type   string
	Fields map[string]any
}

// events is the response's stream as a function of its stored state, so
// every reader — live, late, resumed, on any replica, after a worker crash
// — numbers the same event the same: the events of a running turn are a
// prefix of those of the finished turn. An output item's events appear
// when its message is committed; the final event when the turn is over.
func (t turn) events() []event {
	start := "in_progress"
	if t.rec.Background {
		start = "queued"
	}
	evs := []event{
		{"response.created", map[string]any{"response": t.skeleton(start)}},
		{"response." + start, map[string]any{"response": t.skeleton(start)}},
	}
	if start == "queued" && !t.queued {
		evs = append(evs, event{"response.in_progress", map[string]any{"response": t.skeleton("in_progress")}})
	}
	view := t.view()
	for i, item := range view.Output {
		evs = append(evs, itemEvents(i, item)...)
	}
	if !terminal(view.Status) {
		return evs
	}
	final := map[string]any{"response": view}
	switch view.Status {
	case "completed":
		evs = append(evs, event{"response.completed", final})
	case "failed":
		evs = append(evs, event{"response.failed", final})
	default: // cancelled, incomplete
		evs = append(evs, event{"response.incomplete", final})
	}
	return evs
}

// itemEvents are the events of one finished output item.
func itemEvents(index int, item outputItem) []event {
	at := func(extra map[string]any) map[string]any {
		f := map[string]any{"output_index": index, "item_id": item.ID}
		for k, v := range extra {
			f[k] = v
		}
		return f
	}
	open := item
	open.Status = "in_progress"
	open.Content, open.Summary = []outputPart{}, []summaryPart{}
	if item.Arguments != nil {
		open.Arguments = new(string)
	}
	evs := []event{{"response.output_item.added", map[string]any{"output_index": index, "item": open}}}
	switch item.Type {
	case "message":
		for ci, part := range item.Content {
			empty := part
			empty.Text = ""
			evs = append(evs,
				event{"response.content_part.added", at(map[string]any{"content_index": ci, "part": empty})},
				event{"response.output_text.delta", at(map[string]any{"content_index": ci, "delta": part.Text, "logprobs": []any{}})},
				event{"response.output_text.done", at(map[string]any{"content_index": ci, "text": part.Text, "logprobs": []any{}})},
				event{"response.content_part.done", at(map[string]any{"content_index": ci, "part": part})},
			)
		}
	case "reasoning":
		for si, part := range item.Summary {
			empty := part
			empty.Text = ""
			evs = append(evs,
				event{"response.reasoning_summary_part.added", at(map[string]any{"summary_index": si, "part": empty})},
				event{"response.reasoning_summary_text.delta", at(map[string]any{"summary_index": si, "delta": part.Text})},
				event{"response.reasoning_summary_text.done", at(map[string]any{"summary_index": si, "text": part.Text})},
				event{"response.reasoning_summary_part.done", at(map[string]any{"summary_index": si, "part": part})},
			)
		}
	case "function_call":
		evs = append(evs, functionCallEvents(index, item)...)
	}
	return append(evs, event{"response.output_item.done", map[string]any{"output_index": index, "item": item}})
}
