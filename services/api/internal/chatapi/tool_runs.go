package chatapi

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// Where a worker-executed call of a running chat stands while it has no
// result in history (MessagePart.state).
const (
	callRunning  = "running"
	callPending  = "pending"
	callFinished = "finished"
)

// storedCall names a stored tool call: its assistant message and the
// model's call ID (a model may reuse call IDs across steps).
type storedCall struct {
	messageID  int64
	toolCallID string
}

// callRun is what the messages view shows of a call under way.
type callRun struct {
	state     string
	startedAt time.Time // set when state is running
}

// callsUnderWay reads where each open worker-executed call stands from the
// rows of ChatToolCallsUnderWay, in the order the worker runs them (the
// calls of a step one after another, run_calls.go): the calls whose result
// the worker kept while their step ran on are finished; the first other
// call is running, the rest wait for it. A running call started at its
// durable start record (a never_retry call's); a call with none could start
// once its step was stored and the call before it finished, the worker's
// order, so that is when it is shown running from. Calls of the chat's
// dynamic tools are the client's: they are left out.
func callsUnderWay(rows []queries.ChatToolCallsUnderWayRow, dynamic map[string]bool) map[storedCall]callRun {
	out := map[storedCall]callRun{}
	var ready time.Time // when the next call of the batch could start
	running := false
	for _, row := range rows {
		if dynamic[row.ToolName] {
			continue
		}
		key := storedCall{row.MessageID, row.ToolCallID}
		if row.StoredAt.After(ready) {
			ready = row.StoredAt
		}
		switch {
		case row.FinishedAt != nil:
			out[key] = callRun{state: callFinished}
			if row.FinishedAt.After(ready) {
				ready = *row.FinishedAt
			}
		case running:
			out[key] = callRun{state: callPending}
		default:
			running = true
			started := ready
			if row.StartedAt != nil {
				started = *row.StartedAt
			}
			out[key] = callRun{state: callRunning, startedAt: started}
		}
	}
	return out
}

// markCallsUnderWay sets state (and started_at) on the tool-call parts of
// msgs that runs names.
func markCallsUnderWay(msgs []*chatdv1.Message, runs map[storedCall]callRun) {
	if len(runs) == 0 {
		return
	}
	for _, m := range msgs {
		for _, p := range m.GetContent() {
			if p.GetType() != "tool-call" {
				continue
			}
			run, ok := runs[storedCall{m.GetId(), p.GetToolCallId()}]
			if !ok {
				continue
			}
			p.State = proto.String(run.state)
			if run.state == callRunning {
				p.StartedAt = timestamppb.New(run.startedAt)
			}
		}
	}
}
