package openaiapi

import (
	"encoding/json"
	"strings"
)

// target is what a stream knows of its response now: the stored turn (its
// committed output items, its status) and the live parts of the model
// attempt running it, if any.
type target struct {
	background bool
	// queued: the turn's input still waits in the chat's queue.
	queued   bool
	terminal bool
	// status and response are the response's status and, when terminal,
	// the response the final event carries.
	status   string
	response responseObject
	// skeleton is the response with a status and no output.
	skeleton func(status string) responseObject
	// items are the stored output items, then the live ones.
	items []targetItem
	// liveID names the stream's n-th item, of kind, when it comes from
	// live parts.
	liveID func(kind string, n int) string
}

// targetItem is one output item the stream should show.
type targetItem struct {
	kind string
	text string
	// closed: the item's text is whole (committed, or a live part the
	// model has moved on from).
	closed bool
	// stored is the stored item (nil for a live one).
	stored map[string]any
}

// storedTarget is a stored output item as a target item.
func storedTarget(item outputItem) (targetItem, error) {
	raw, err := json.Marshal(item)
	if err != nil {
		return targetItem{}, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return targetItem{}, err
	}
	t := targetItem{kind: item.Type, closed: true, stored: m}
	switch item.Type {
	case kindMessage:
		var b strings.Builder
		for _, p := range item.Content {
			b.WriteString(p.Text)
		}
		t.text = b.String()
	case kindReasoning:
		var b strings.Builder
		for _, p := range item.Summary {
			b.WriteString(p.Text)
		}
		t.text = b.String()
	case kindFunctionCall:
		t.text, _ = m["arguments"].(string)
	}
	// Any other type is shown whole: added, then done.
	return t, nil
}

// plan returns the events that bring the stream from what its journal
// holds (st) to what is known now (tg), in order; none when there is
// nothing new. It never changes st. The events extend the journal in a way
// every later state extends too:
//
//   - An open item continues while the known text of the item at its
//     place starts with what it streamed (the rest is one delta); it is
//     closed when that text is whole. So a model attempt that restarts
//     after a crash and says the same again continues the item the dead
//     attempt opened.
//   - An open item whose text the known item does not start with (another
//     attempt said something else), or that nothing known matches once the
//     response is over, is closed as "incomplete" with what it streamed;
//     the known item then follows as a new one.
//   - A closed item stands for the known item at its place when their texts
//     are equal, else it is skipped (the known item follows as a new one).
//   - While live parts are behind the journal (another replica's writer got
//     further), or a new attempt has not yet reached an item the journal
//     holds, nothing is planned: the next state decides.
func plan(st *foldState, tg target) []streamEvent {
	if st.final {
		return nil
	}
	p := planner{st: st, tg: tg, next: len(st.items), start: st.start}
	p.run()
	return p.out
}

type planner struct {
	st    *foldState
	tg    target
	out   []streamEvent
	next  int // the output_index of the next new item
	start string
}

func (p *planner) emit(evs ...streamEvent) { p.out = append(p.out, evs...) }

func (p *planner) responseEvent(typ, status string) {
	p.emit(newEvent(typ, map[string]any{"response": p.tg.skeleton(status)}))
}

func (p *planner) run() {
	tg := p.tg
	if p.st.n == 0 {
		p.start = "in_progress"
		if tg.background {
			p.start = "queued"
		}
		p.responseEvent("response.created", p.start)
		p.responseEvent("response."+p.start, p.start)
	}
	if tg.queued {
		// Only a cancel ends a response that never left the queue.
		if tg.terminal {
			p.finish()
		}
		return
	}
	if p.start == "queued" && !p.st.started {
		p.responseEvent("response.in_progress", "in_progress")
	}
	k, ok := p.journaled()
	if !ok {
		return
	}
	for ; k < len(tg.items); k++ {
		t := tg.items[k]
		index := p.next
		p.next++
		id := p.newID(t, index)
		p.emit(openEvents(index, id, t.kind, t.stored)...)
		if t.text != "" {
			p.emit(deltaEvent(index, id, t.kind, t.text))
		}
		if !t.closed {
			return
		}
		p.emit(closeEvents(index, id, t.kind, t.text, "completed", t.stored)...)
	}
	if tg.terminal {
		p.finish()
	}
}

// journaled walks the journal's items against the known ones (see plan),
// planning the deltas and closes of the open item. It returns the index of
// the first known item the journal does not show, and false when nothing
// more can be planned now.
func (p *planner) journaled() (int, bool) {
	tg := p.tg
	k := 0
	for i := range p.st.items {
		it := &p.st.items[i]
		var t *targetItem
		if k < len(tg.items) && tg.items[k].kind == it.kind {
			t = &tg.items[k]
		}
		// Nothing known at this place yet: a new attempt has not got this
		// far. Once the response is over, nothing ever will be.
		waiting := k >= len(tg.items) && !tg.terminal
		if !it.open {
			switch {
			case it.status != "completed":
			case t != nil && t.closed && t.text == string(it.text):
				k++
			case t != nil && !t.closed && bytesHavePrefix(it.text, t.text), waiting:
				return k, false
			}
			continue
		}
		if t != nil && hasPrefix(t.text, it.text) {
			if rest := t.text[len(it.text):]; rest != "" {
				p.emit(deltaEvent(i, it.id, it.kind, rest))
			}
			if !t.closed {
				return k, false
			}
			p.emit(closeEvents(i, it.id, it.kind, t.text, "completed", t.stored)...)
			k++
			continue
		}
		if t != nil && !t.closed && bytesHavePrefix(it.text, t.text) || waiting {
			return k, false
		}
		p.emit(closeEvents(i, it.id, it.kind, string(it.text), "incomplete", nil)...)
	}
	return k, true
}

// newID names a new item at index: a stored item keeps its id.
func (p *planner) newID(t targetItem, index int) string {
	if id, _ := t.stored["id"].(string); id != "" {
		return id
	}
	return p.tg.liveID(t.kind, index)
}

func (p *planner) finish() {
	p.emit(newEvent(finalType(p.tg.status), map[string]any{"response": p.tg.response}))
}

// hasPrefix and bytesHavePrefix compare without copying the journal's
// text (string(b) in a comparison does not allocate).
func hasPrefix(s string, prefix []byte) bool {
	return len(s) >= len(prefix) && s[:len(prefix)] == string(prefix)
}

func bytesHavePrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}
