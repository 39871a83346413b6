package runner

import (
	"encoding/json"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/telemetry/timeline"
)

// answer is one model call's response as it streams, its text held once:
// the part buffer's episode keeps every text and reasoning delta for the
// watchers, so while it takes them all the answer keeps only the
// response's shape (its parts, tool calls, usage and finish) and reads the
// text back from the episode when the stream ends. A running chat's answer
// grows token by token for minutes; held twice, it was the larger part of
// what a running chat costs the worker.
//
// The answer keeps the text itself when there is no buffer, when the
// episode is not this call's own (CreateEpisode found it existing), and
// from the first delta the episode refuses (full, or closed by an
// interrupt): then it first copies what the episode holds so far.
type answer struct {
	acc   llm.Accumulator // every event, the text left out of deltas
	buf   *partbuf.Buffer // nil: no buffer
	ep    partbuf.Episode
	inBuf bool     // the episode holds every delta's text so far
	texts [][]byte // texts[i]: part i's text when !inBuf
}

// newAnswer starts the answer of the call streamed in episode ep of buf
// (nil: none); owned says the call created the episode.
func newAnswer(buf *partbuf.Buffer, ep partbuf.Episode, owned bool) *answer {
	return &answer{buf: buf, ep: ep, inBuf: buf != nil && owned}
}

// add folds ev in and adds its part to the episode, best effort. It fails
// only for an event that breaks the stream's ordering contract.
func (a *answer) add(ev llm.Event) error {
	typ, isDelta := deltaType(ev.Type)
	if !isDelta {
		if err := a.acc.Add(ev); err != nil {
			return err
		}
		a.addOther(ev)
		return nil
	}
	text := ev.Delta
	ev.Delta = ""
	if err := a.acc.Add(ev); err != nil {
		return err
	}
	var err error = partbuf.ErrEpisodeNotFound
	if a.buf != nil {
		var seq int64
		seq, err = a.buf.AddDelta(a.ep, string(chatstate.RoleAssistant), ev.Part, typ, text)
		a.mark(seq)
	}
	if a.inBuf && err == nil {
		return nil
	}
	if a.inBuf {
		a.keepTexts()
	}
	for len(a.texts) <= ev.Part {
		a.texts = append(a.texts, nil)
	}
	a.texts[ev.Part] = append(a.texts[ev.Part], text...)
	return nil
}

// addOther adds a tool call to the episode, best effort; other events
// carry no part.
func (a *answer) addOther(ev llm.Event) {
	if a.buf == nil || ev.Type != llm.EventToolCall || !json.Valid(ev.ToolCall.Input) {
		return
	}
	data, err := json.Marshal(streamPart{Index: ev.Part, Part: chatmsg.ToolCall(ev.ToolCall.ID, ev.ToolCall.Name, ev.ToolCall.Input)})
	if err != nil {
		return
	}
	seq, _ := a.buf.AddPart(a.ep, string(chatstate.RoleAssistant), data)
	a.mark(seq)
}

// mark notes the episode's first part on the turn's timeline.
func (a *answer) mark(seq int64) {
	if seq == 1 {
		timeline.Mark("worker.part1")
	}
}

// keepTexts copies the text the episode holds into the answer, which keeps
// the text from now on.
func (a *answer) keepTexts() {
	a.inBuf = false
	content := a.acc.Content()
	a.texts = make([][]byte, len(content))
	for i, p := range content {
		if typ, ok := partDeltaType(p.Type); ok {
			text, _ := a.buf.DeltaText(a.ep, string(chatstate.RoleAssistant), i, typ)
			a.texts[i] = []byte(text)
		}
	}
}

// response is the whole response: the accumulated parts with their text,
// read back from the episode (which the caller has not closed yet, or not
// for long: a closed episode is kept a while) or from the answer.
func (a *answer) response() llm.Response {
	content := a.acc.Content()
	for i, p := range content {
		typ, ok := partDeltaType(p.Type)
		switch {
		case !ok:
		case a.inBuf:
			content[i].Text, _ = a.buf.DeltaText(a.ep, string(chatstate.RoleAssistant), i, typ)
		case i < len(a.texts):
			content[i].Text = string(a.texts[i])
		}
	}
	return llm.Response{Content: content, Usage: a.acc.Usage(), FinishReason: a.acc.FinishReason()}
}

// deltaType is the part buffer's delta type of a text or reasoning delta
// event; false for any other event.
func deltaType(t llm.EventType) (string, bool) {
	switch t {
	case llm.EventTextDelta:
		return partbuf.DeltaText, true
	case llm.EventReasoningDelta:
		return partbuf.DeltaReasoning, true
	}
	return "", false
}

// partDeltaType is the part buffer's delta type of a text or reasoning
// part; false for any other part.
func partDeltaType(t chatmsg.PartType) (string, bool) {
	switch t {
	case chatmsg.PartText:
		return partbuf.DeltaText, true
	case chatmsg.PartReasoning:
		return partbuf.DeltaReasoning, true
	}
	return "", false
}
