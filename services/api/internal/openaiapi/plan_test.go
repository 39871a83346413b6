package openaiapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// journalFixture is a stream's journal, grown by planning against targets
// as a stream would.
type journalFixture struct {
	t      *testing.T
	st     foldState
	events []streamEvent
}

func setupJournal(t *testing.T) *journalFixture { return &journalFixture{t: t} }

// step plans against tg, applies what was planned and returns its types.
func (j *journalFixture) step(tg target) []string {
	j.t.Helper()
	evs := plan(&j.st, tg)
	types := make([]string, len(evs))
	for i, e := range evs {
		require.NoError(j.t, j.st.apply(e), "event %d (%s)", i, e.Type)
		types[i] = e.Type
	}
	j.events = append(j.events, evs...)
	return types
}

// fields decodes event i.
func (j *journalFixture) fields(i int) map[string]any {
	var m map[string]any
	require.NoError(j.t, json.Unmarshal(j.events[i].Data, &m))
	return m
}

// deltas joins the deltas of output item index.
func (j *journalFixture) deltas(index int) string {
	var b strings.Builder
	for i, e := range j.events {
		if strings.HasSuffix(e.Type, ".delta") && j.fields(i)["output_index"] == float64(index) {
			b.WriteString(j.fields(i)["delta"].(string))
		}
	}
	return b.String()
}

// doneItem is the item of output item index's output_item.done.
func (j *journalFixture) doneItem(index int) map[string]any {
	for i, e := range j.events {
		if f := j.fields(i); e.Type == "response.output_item.done" && f["output_index"] == float64(index) {
			return f["item"].(map[string]any)
		}
	}
	j.t.Fatalf("item %d was never closed", index)
	return nil
}

func baseTarget(background bool, status string) target {
	return target{
		background: background, status: status, terminal: terminal(status),
		skeleton: func(s string) responseObject { return responseObject{Status: s, Output: []outputItem{}} },
		liveID:   func(kind string, n int) string { return fmt.Sprintf("%s_live_%d", kind, n) },
		response: responseObject{Status: status},
	}
}

func live(kind, text string, closed bool) targetItem {
	return targetItem{kind: kind, text: text, closed: closed}
}

func stored(t *testing.T, item outputItem) targetItem {
	t.Helper()
	ti, err := storedTarget(item)
	require.NoError(t, err)
	return ti
}

func storedText(id, text string) outputItem {
	return outputItem{ID: id, Type: kindMessage, Status: "completed", Role: "assistant",
		Content: []outputPart{{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}}}
}

var messageOpen = []string{"response.output_item.added", "response.content_part.added"}
var messageClose = []string{"response.output_text.done", "response.content_part.done", "response.output_item.done"}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestPlanReplaysAStoredResponseInOneGo(t *testing.T) {
	j := setupJournal(t)
	tg := baseTarget(false, "completed")
	tg.items = []targetItem{stored(t, storedText("msg_7_0", "hello there"))}
	got := j.step(tg)
	require.Equal(t, concat([]string{"response.created", "response.in_progress"}, messageOpen,
		[]string{"response.output_text.delta"}, messageClose, []string{"response.completed"}), got)
	require.Equal(t, "hello there", j.deltas(0))
	require.Equal(t, "msg_7_0", j.doneItem(0)["id"], "an item first seen stored keeps its stored id")
	require.Empty(t, j.step(tg), "a sealed journal plans nothing")
}

func TestPlanStreamsLivePartsThenTheCommit(t *testing.T) {
	j := setupJournal(t)
	tg := baseTarget(false, "in_progress")
	tg.items = []targetItem{live(kindMessage, "Hel", false)}
	require.Equal(t, concat([]string{"response.created", "response.in_progress"}, messageOpen,
		[]string{"response.output_text.delta"}), j.step(tg))

	tg.items = []targetItem{live(kindMessage, "Hello wor", false)}
	require.Equal(t, []string{"response.output_text.delta"}, j.step(tg))
	// A writer whose live parts lag behind the journal plans nothing.
	tg.items = []targetItem{live(kindMessage, "Hello", false)}
	require.Empty(t, j.step(tg))

	// The commit closes the item with the stored text; the final event
	// comes when the response is over.
	tg.items = []targetItem{stored(t, storedText("msg_9_0", "Hello world"))}
	require.Equal(t, concat([]string{"response.output_text.delta"}, messageClose), j.step(tg))
	done := baseTarget(false, "completed")
	done.items = tg.items
	require.Equal(t, []string{"response.completed"}, j.step(done))
	require.Equal(t, "Hello world", j.deltas(0))
	item := j.doneItem(0)
	require.Equal(t, "message_live_0", item["id"], "a live item keeps the id it was opened with")
	require.Equal(t, "completed", item["status"])
}

func TestPlanContinuesAnItemWhenARestartedAttemptSaysTheSame(t *testing.T) {
	j := setupJournal(t)
	tg := baseTarget(false, "in_progress")
	tg.items = []targetItem{live(kindMessage, "tok1 tok2", false)}
	j.step(tg)
	// The worker died; the next attempt has no parts yet, then says the
	// same from the start.
	tg.items = nil
	require.Empty(t, j.step(tg))
	tg.items = []targetItem{live(kindMessage, "tok1", false)}
	require.Empty(t, j.step(tg))
	tg.items = []targetItem{live(kindMessage, "tok1 tok2 tok3", false)}
	require.Equal(t, []string{"response.output_text.delta"}, j.step(tg))
	done := baseTarget(false, "completed")
	done.items = []targetItem{stored(t, storedText("msg_3_0", "tok1 tok2 tok3 tok4"))}
	require.Equal(t, concat([]string{"response.output_text.delta"}, messageClose, []string{"response.completed"}), j.step(done))
	require.Equal(t, "tok1 tok2 tok3 tok4", j.deltas(0))
	require.Len(t, j.st.items, 1)
}

func TestPlanEndsADeadAttemptsItemIncomplete(t *testing.T) {
	j := setupJournal(t)
	tg := baseTarget(false, "in_progress")
	tg.items = []targetItem{live(kindMessage, "The answer", false)}
	j.step(tg)
	// The next attempt says something else: the first item ends
	// incomplete, the new one follows.
	tg.items = []targetItem{live(kindMessage, "A different", false)}
	require.Equal(t, concat(messageClose, messageOpen, []string{"response.output_text.delta"}), j.step(tg))
	require.Equal(t, "incomplete", j.doneItem(0)["status"])
	done := baseTarget(false, "completed")
	done.items = []targetItem{stored(t, storedText("msg_4_0", "A different answer."))}
	require.Equal(t, concat([]string{"response.output_text.delta"}, messageClose, []string{"response.completed"}), j.step(done))
	require.Equal(t, "The answer", j.deltas(0))
	require.Equal(t, "A different answer.", j.deltas(1))
	require.Equal(t, "completed", j.doneItem(1)["status"])
}

func TestPlanClosesAnItemNothingMatchesWhenTheResponseEnds(t *testing.T) {
	j := setupJournal(t)
	tg := baseTarget(false, "in_progress")
	tg.items = []targetItem{live(kindMessage, "partial", false)}
	j.step(tg)
	failed := baseTarget(false, "failed")
	require.Equal(t, concat(messageClose, []string{"response.failed"}), j.step(failed))
	require.Equal(t, "incomplete", j.doneItem(0)["status"])
	require.Equal(t, "partial", j.doneItem(0)["content"].([]any)[0].(map[string]any)["text"])
}

func TestPlanClosesReasoningWhenTheTextStarts(t *testing.T) {
	j := setupJournal(t)
	tg := baseTarget(true, "in_progress")
	tg.items = []targetItem{live(kindReasoning, "thinking", true), live(kindMessage, "Hi", false)}
	require.Equal(t, []string{"response.created", "response.queued", "response.in_progress",
		"response.output_item.added", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta"}, j.step(tg))
	require.Equal(t, "reasoning_live_0", j.doneItem(0)["id"])
	// The commit: the closed reasoning stands for the stored one.
	done := baseTarget(true, "completed")
	done.items = []targetItem{
		stored(t, outputItem{ID: "rs_5_0", Type: kindReasoning, Summary: []summaryPart{{Type: "summary_text", Text: "thinking"}}}),
		stored(t, storedText("msg_5_1", "Hi there")),
	}
	require.Equal(t, concat([]string{"response.output_text.delta"}, messageClose, []string{"response.completed"}), j.step(done))
	require.Len(t, j.st.items, 2)
}

func TestPlanWaitsForAQueuedResponse(t *testing.T) {
	j := setupJournal(t)
	tg := baseTarget(true, "queued")
	tg.queued = true
	require.Equal(t, []string{"response.created", "response.queued"}, j.step(tg))
	require.Empty(t, j.step(tg))
	cancelled := baseTarget(true, "cancelled")
	cancelled.queued = true
	require.Equal(t, []string{"response.incomplete"}, j.step(cancelled))
}

func TestPlanStreamsAFunctionCallWhole(t *testing.T) {
	j := setupJournal(t)
	tg := baseTarget(false, "completed")
	// The stored item as the view renders it (its fields come from its
	// JSON, whatever struct the view uses).
	ti := targetItem{kind: kindFunctionCall, text: `{"q":1}`, closed: true,
		stored: map[string]any{"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1", "name": "lookup", "arguments": `{"q":1}`}}
	tg.items = []targetItem{ti}
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}, j.step(tg))
	added := j.fields(2)["item"].(map[string]any)
	require.Equal(t, "", added["arguments"])
	require.Equal(t, "call_1", added["call_id"])
	require.Equal(t, `{"q":1}`, j.deltas(0))
	require.Equal(t, `{"q":1}`, j.doneItem(0)["arguments"])
}

func TestFoldRefusesAnInconsistentJournal(t *testing.T) {
	var st foldState
	require.Error(t, st.apply(streamEvent{Type: "response.output_text.delta", Data: json.RawMessage(`{"output_index":0,"delta":"x"}`)}))
	require.Error(t, st.apply(streamEvent{Type: "response.output_item.added", Data: json.RawMessage(`{"output_index":3,"item":{"id":"a","type":"message"}}`)}))
}

func TestPlanShowsAnItemOfAnotherTypeWhole(t *testing.T) {
	j := setupJournal(t)
	tg := baseTarget(false, "completed")
	ti, err := storedTarget(outputItem{ID: "x_1", Type: "custom_tool_call", Status: "completed"})
	require.NoError(t, err)
	tg.items = []targetItem{ti}
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.output_item.done", "response.completed"}, j.step(tg))
	require.Equal(t, "custom_tool_call", j.doneItem(0)["type"])
}
