package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chatd/chatd/cmd/internal/loadgen"
)

// Watch tuning.
const (
	// watchIdleTimeout is how long a connection may stay silent before it
	// counts as dropped; the stream sends a heartbeat every 15 s.
	watchIdleTimeout = 45 * time.Second
	// watchMaxFailures is how many reconnects in a row may fail before
	// watch gives up.
	watchMaxFailures = 8
	// exitInterrupted is watch --until-idle's code when Ctrl-C stopped it
	// before the chat went idle.
	exitInterrupted = 130
)

func chatWatchFlags(fs *flag.FlagSet) func(context.Context, *chatRun, []string) int {
	cursor := fs.String("cursor", "", "Resume after this cursor (an event's SSE id) instead of replaying the chat.")
	untilIdle := fs.Bool("until-idle", false, "Exit when the chat stops: 0 when it is waiting (or requires_action), 1 on error.")
	return func(ctx context.Context, x *chatRun, args []string) int {
		chatID, args, ok := x.chatID(args)
		if !ok {
			return exitUsage
		}
		if len(args) > 0 {
			return x.usageError("unexpected argument %q.", args[0])
		}
		w := &watcher{client: x.client, chatID: chatID, cursor: *cursor, untilIdle: *untilIdle,
			stderr: x.e.stderr, r: &renderer{out: x.e.stdout},
			backoff: 250 * time.Millisecond, maxBackoff: 5 * time.Second, idle: watchIdleTimeout}
		return w.run(ctx)
	}
}

// watcher follows one chat's SSE stream, reconnecting with its cursor.
type watcher struct {
	client    *chatClient
	chatID    string
	cursor    string // the id of the last event rendered
	untilIdle bool
	// failed is set when --until-idle saw status error: the watch ends
	// after the next event, the error's reason.
	failed bool
	stderr io.Writer
	r      *renderer
	// backoff is the first reconnect delay, doubled per failure up to
	// maxBackoff; idle is the silence after which a connection is dropped.
	backoff, maxBackoff, idle time.Duration
}

// errStop ends the watch with code.
type errStop struct{ code int }

func (e errStop) Error() string { return fmt.Sprintf("stop %d", e.code) }

func (w *watcher) run(ctx context.Context) int {
	failures := 0
	for {
		progressed, err := w.connect(ctx)
		var stop errStop
		switch {
		case errors.As(err, &stop):
			return stop.code
		case w.failed:
			// The chat ended in error and the stream ended before (or
			// instead of) the reason.
			w.r.endLine()
			return exitFailed
		case ctx.Err() != nil:
			w.r.endLine()
			if w.untilIdle {
				return exitInterrupted
			}
			return exitOK
		}
		var apiErr *apiError
		if errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests {
			// The server answered and said no (or answered something
			// that is not a stream): retrying will not help.
			w.r.endLine()
			fmt.Fprintf(w.stderr, "chatd: %v\n", err)
			return exitFailed
		}
		if progressed {
			failures = 0
		}
		failures++
		if failures > watchMaxFailures {
			w.r.endLine()
			fmt.Fprintf(w.stderr, "chatd: giving up after %d attempts: %v\n", failures, err)
			return exitFailed
		}
		delay := w.backoff << (failures - 1)
		if delay > w.maxBackoff || delay <= 0 {
			delay = w.maxBackoff
		}
		// The notice goes to stderr; the transcript on stdout stays whole
		// (a reply cut by the drop continues where it stopped).
		nl := ""
		if w.r.midLine {
			nl = "\n"
		}
		fmt.Fprintf(w.stderr, "%s[connection lost: %v; reconnecting in %s]\n", nl, err, delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if w.untilIdle {
				return exitInterrupted
			}
			return exitOK
		case <-t.C:
		}
	}
}

// connect opens the stream once and renders it until it ends. progressed
// reports whether the connection was established (so the failure count
// restarts); the error says why it ended (errStop: the watch is over).
func (w *watcher) connect(ctx context.Context) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.client.streamURL+"/api/v2/chats/"+w.chatID+"/stream", nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+w.client.token)
	req.Header.Set("Accept", "text/event-stream")
	if w.cursor != "" {
		req.Header.Set("Last-Event-ID", w.cursor)
	}
	resp, err := w.client.stream.Do(req)
	if err != nil {
		return false, connError(w.client.streamURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, readAPIError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, &apiError{Status: resp.StatusCode, Message: fmt.Sprintf("%s/api/v2/chats/%s/stream answered %q, not an event stream; is --stream-url right?", w.client.streamURL, w.chatID, ct)}
	}

	// A silent connection (no event, no heartbeat) counts as dropped.
	var mu sync.Mutex
	idled := false
	watchdog := time.AfterFunc(w.idle, func() {
		mu.Lock()
		idled = true
		mu.Unlock()
		cancel()
	})
	defer watchdog.Stop()

	err = loadgen.ReadSSE(resp.Body, func() { watchdog.Reset(w.idle) }, func(id, data string) error {
		if err := w.handle(data); err != nil {
			return err
		}
		if id != "" {
			w.cursor = id
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case idled:
		return true, fmt.Errorf("no data for %s", w.idle)
	case err == nil:
		return true, errors.New("the stream ended")
	}
	return true, err
}

// handle renders one event's data.
func (w *watcher) handle(data string) error {
	var ev streamEvent
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		return nil // not an event of ours: skip it
	}
	status := w.r.render(ev)
	if !w.untilIdle {
		return nil
	}
	if w.failed {
		// The status said error; the event after it is the reason (the
		// stream sends them in that order), printed above. Any other
		// event means no reason is coming.
		w.r.endLine()
		return errStop{exitFailed}
	}
	switch status {
	case "waiting", "requires_action":
		w.r.endLine()
		return errStop{exitOK}
	case "error":
		w.failed = true
	}
	return nil
}

// streamEvent is one stream event: {"type", "chat_id", "<type>": payload}.
type streamEvent struct {
	Type        string `json:"type"`
	MessagePart *struct {
		Role string   `json:"role"`
		Part chatPart `json:"part"`
	} `json:"message_part"`
	Message *chatMessage `json:"message"`
	Status  *struct {
		Status string `json:"status"`
	} `json:"status"`
	Error *struct {
		Message   string `json:"message"`
		Kind      string `json:"kind"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
	QueueUpdate *struct {
		QueuedMessages []json.RawMessage `json:"queued_messages"`
	} `json:"queue_update"`
	ActionRequired *struct {
		ToolCalls []chatPart `json:"tool_calls"`
	} `json:"action_required"`
	Retry *struct {
		Attempt int    `json:"attempt"`
		DelayMS int64  `json:"delay_ms"`
		Error   string `json:"error"`
	} `json:"retry"`
}

// renderer writes a chat's events as a terminal transcript: user messages
// as "> text", the assistant's reply inline as its parts arrive, and
// everything else as a bracketed line.
type renderer struct {
	out io.Writer
	// live is what the current episode's parts printed, so the committed
	// message does not print it again; liveKind is the last part's type.
	live     strings.Builder
	liveKind string
	midLine  bool // the output does not end with a newline
}

// render writes ev and returns the status it announces ("" when none).
func (r *renderer) render(ev streamEvent) string {
	switch ev.Type {
	case "message_part":
		if ev.MessagePart == nil {
			return ""
		}
		if line, ok := toolLiveLine(ev.MessagePart.Part); ok {
			// A running call's state: a line of its own, not reply text.
			r.line(line)
			return ""
		}
		s := renderPart(&r.liveKind, ev.MessagePart.Part)
		r.live.WriteString(s)
		r.write(s)
	case "preview_reset":
		// The episode restarted (a retry, an edit, an interruption): what
		// was shown live is void; say so instead of printing it twice.
		if r.live.Len() > 0 {
			r.line("[reply restarted]")
		}
		r.resetLive()
	case "history_reset":
		r.line("[history reset]")
		r.resetLive()
	case "message":
		if ev.Message != nil {
			r.message(*ev.Message)
		}
	case "status":
		if ev.Status != nil {
			r.line("[" + ev.Status.Status + "]")
			return ev.Status.Status
		}
	case "error":
		if ev.Error != nil && ev.Error.Message != "" {
			kind := ""
			if ev.Error.Kind != "" {
				kind = " (" + ev.Error.Kind + ")"
			}
			r.line("[error" + kind + ": " + ev.Error.Message + "]")
		}
	case "queue_update":
		if ev.QueueUpdate != nil {
			r.line(fmt.Sprintf("[queue: %d waiting]", len(ev.QueueUpdate.QueuedMessages)))
		}
	case "action_required":
		if ev.ActionRequired != nil {
			for _, c := range ev.ActionRequired.ToolCalls {
				r.line(fmt.Sprintf("[action required: tool %s %s, id %s]", c.ToolName, compactJSON(c.Args), c.ToolCallID))
			}
		}
	case "retry":
		if ev.Retry != nil {
			r.line(fmt.Sprintf("[retry %d in %s: %s]", ev.Retry.Attempt, time.Duration(ev.Retry.DelayMS)*time.Millisecond, ev.Retry.Error))
		}
	}
	return ""
}

// message writes a committed message; an assistant message whose start
// was already shown live prints only the rest.
func (r *renderer) message(m chatMessage) {
	switch m.Role {
	case "user":
		r.endLine()
		r.resetLive()
		var b strings.Builder
		var notices []string
		for _, p := range m.Content {
			switch p.Type {
			case "text":
				b.WriteString(p.Text)
			case "hook-notice":
				notices = append(notices, noticeLine(p)) // attached to the prompt, not part of it
			default:
				kind := ""
				b.WriteString(renderPart(&kind, p))
			}
		}
		r.line("> " + strings.ReplaceAll(b.String(), "\n", "\n> "))
		for _, n := range notices {
			r.line(n)
		}
	case "assistant", "tool":
		kind := ""
		var b strings.Builder
		for _, p := range m.Content {
			b.WriteString(renderPart(&kind, p))
		}
		full, live := b.String(), r.live.String()
		if rest, ok := strings.CutPrefix(full, live); ok && live != "" {
			r.write(rest)
		} else {
			if live != "" {
				r.line("[reply as committed:]")
			}
			r.endLine()
			r.write(full)
		}
		r.endLine()
		r.resetLive()
	default:
		// system messages are not part of the transcript, except a lifecycle
		// hook's notices
		for _, p := range m.Content {
			if p.Type == "hook-notice" {
				r.endLine()
				r.resetLive()
				r.line(noticeLine(p))
			}
		}
	}
}

// noticeLine renders a hook-notice part: a policy notice, never shown as
// something the user typed.
func noticeLine(p chatPart) string {
	label := "[policy notice"
	if p.Hook != "" {
		label += " (" + p.Hook + ")"
	}
	return label + ": " + strings.ReplaceAll(p.Text, "\n", "\n  ") + "]"
}

func (r *renderer) resetLive() {
	r.live.Reset()
	r.liveKind = ""
}

// write prints s as is.
func (r *renderer) write(s string) {
	if s == "" {
		return
	}
	fmt.Fprint(r.out, s)
	r.midLine = !strings.HasSuffix(s, "\n")
}

// line prints s on a line of its own.
func (r *renderer) line(s string) {
	r.endLine()
	fmt.Fprintln(r.out, s)
}

// endLine ends a line left open by inline text.
func (r *renderer) endLine() {
	if r.midLine {
		fmt.Fprintln(r.out)
		r.midLine = false
	}
}

// renderPart renders one part (or part delta); kind is the previous part's
// type, so a change of type starts a new line and label.
func renderPart(kind *string, p chatPart) string {
	prev := *kind
	*kind = p.Type
	sep := ""
	if prev != "" && prev != p.Type {
		sep = "\n"
	}
	switch p.Type {
	case "text":
		return sep + p.Text
	case "reasoning":
		if prev == "reasoning" {
			return p.Text
		}
		return sep + "(thinking) " + p.Text
	case "tool-call":
		if prev != "" {
			sep = "\n"
		}
		return sep + fmt.Sprintf("[tool call %s %s]", p.ToolName, compactJSON(p.Args))
	case "tool-result":
		if prev != "" {
			sep = "\n"
		}
		word := "result"
		if p.IsError {
			word = "error"
		}
		return sep + fmt.Sprintf("[tool %s %s: %s]", word, p.ToolName, shorten(compactJSON(p.Result), 200))
	case "file":
		return sep + fmt.Sprintf("[file %s]", p.Name)
	default:
		return sep + "[" + p.Type + "]"
	}
}

// compactJSON renders raw JSON on one line.
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// toolLiveLine renders a running tool call's live part (tool-status,
// tool-progress) as a bracketed line; ok is false for any other part.
func toolLiveLine(p chatPart) (string, bool) {
	switch p.Type {
	case "tool-status":
		if p.DurationMS != nil {
			d := time.Duration(*p.DurationMS) * time.Millisecond
			return fmt.Sprintf("[tool %s %s after %s]", p.ToolName, p.State, d.Round(time.Millisecond)), true
		}
		return fmt.Sprintf("[tool %s %s]", p.ToolName, p.State), true
	case "tool-progress":
		at := ""
		if p.Progress != nil {
			at = strconv.FormatFloat(*p.Progress, 'f', -1, 64)
			if p.Total != nil {
				at += "/" + strconv.FormatFloat(*p.Total, 'f', -1, 64)
			}
		}
		return strings.TrimSpace(fmt.Sprintf("[tool %s progress %s %s", p.ToolName, at, p.Message)) + "]", true
	}
	return "", false
}
