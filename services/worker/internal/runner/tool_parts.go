package runner

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/services/worker/internal/agenttools"
)

// Live tool parts: while a stored step's calls run, watchers see which
// calls are running, since when, how far they got (an MCP server's
// notifications/progress) and how each ended, as message parts of the
// episode of the step's history version (role "tool"). They are live only,
// like a model's deltas: the stored results are the record.

// Tool part types and states.
const (
	partToolStatus   = "tool-status"
	partToolProgress = "tool-progress"

	toolRunning  = "running"
	toolFinished = "finished"
	toolFailed   = "failed"
)

// toolLivePart is the JSON of one live tool part.
type toolLivePart struct {
	Index      int        `json:"index"` // the call's position in the batch
	Type       string     `json:"type"`
	ToolCallID string     `json:"tool_call_id"`
	ToolName   string     `json:"tool_name"`
	State      string     `json:"state,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	DurationMS *int64     `json:"duration_ms,omitempty"`
	Progress   *float64   `json:"progress,omitempty"`
	Total      *float64   `json:"total,omitempty"`
	Message    string     `json:"message,omitempty"`
}

// toolParts adds a batch's live tool parts to its episode.
type toolParts struct {
	r  *runner
	ep partbuf.Episode
}

// openToolParts opens the batch's episode: the history version the step
// was stored at and the chat's generation attempt, the episode watchers of
// that history follow.
func (r *runner) openToolParts(in intent, attempt int64) *toolParts {
	t := &toolParts{r: r, ep: partbuf.Episode{ChatID: r.spec.ChatID, HistoryVersion: in.HistoryVersion, GenerationAttempt: attempt}}
	if buf := r.deps.Parts; buf != nil {
		if err := buf.CreateEpisode(t.ep); err != nil {
			r.log.Debug("create tool episode", slog.String("episode", t.ep.String()), slog.String("error", err.Error()))
		}
	}
	return t
}

func (t *toolParts) close() {
	if buf := t.r.deps.Parts; buf != nil {
		buf.CloseEpisode(t.ep)
	}
}

func (t *toolParts) add(p toolLivePart) {
	buf := t.r.deps.Parts
	if buf == nil {
		return
	}
	data, err := json.Marshal(p)
	if err != nil {
		return
	}
	_, _ = buf.AddPart(t.ep, "tool", data) // best effort, like every live part
}

// started shows call i of the batch running since at, and records its
// start in the episode's tool timings.
func (t *toolParts) started(i int, c openCall, at time.Time) {
	if buf := t.r.deps.Parts; buf != nil {
		_ = buf.RecordToolStart(t.ep, i, at)
	}
	t.add(toolLivePart{Index: i, Type: partToolStatus, ToolCallID: c.ToolCallID, ToolName: c.ToolName, State: toolRunning, StartedAt: &at})
}

// progress shows how far call i got.
func (t *toolParts) progress(i int, c openCall, p agenttools.Progress) {
	lp := toolLivePart{Index: i, Type: partToolProgress, ToolCallID: c.ToolCallID, ToolName: c.ToolName, Progress: &p.Progress, Message: p.Message}
	if p.Total > 0 {
		lp.Total = &p.Total
	}
	t.add(lp)
}

// finished shows how call i, started at began, ended at.
func (t *toolParts) finished(i int, c openCall, began, at time.Time, isErr bool) {
	if buf := t.r.deps.Parts; buf != nil {
		_ = buf.RecordToolCompletion(t.ep, i, at)
	}
	state, ms := toolFinished, at.Sub(began).Milliseconds()
	if isErr {
		state = toolFailed
	}
	t.add(toolLivePart{Index: i, Type: partToolStatus, ToolCallID: c.ToolCallID, ToolName: c.ToolName, State: state, StartedAt: &began, DurationMS: &ms})
}
