// Package scripted is the deterministic scripted model: no network, no
// randomness, every worker path reachable on command. It is the default
// model of a fresh install and the test double of the worker.
//
// It reads the last user message (each text part a line of its own). Each
// line that starts with "::" is a directive; all other text is echoed back
// as "echo: <text>" (the non-directive lines joined, trimmed).
//
//	::reply <text>              answer exactly <text>
//	::stream <n> <rate>         answer "tok1 tok2 … tokn", one delta per token,
//	                            <rate> tokens per second (0 = as fast as possible)
//	::think <text>              emit a reasoning part first
//	::tool <name> <json-args>   call that tool with those arguments; several
//	                            lines = parallel calls; after the results
//	                            arrive, answer "done"
//	::fail retryable [n]        the first n attempts (default: every attempt)
//	::fail fatal [n]            fail with that kind of error
//	::stall                     open the stream and never produce a token
//	                            (until the context ends)
//	::usage <prompt> <output>   report that token usage for the response
//	::title <text>              the answer to a title request (ignored
//	                            in a chat's turns)
//	::title-fail retryable [n]  like ::fail, for title requests only
//	::title-fail fatal [n]
//	::files                     answer with a line per attachment the
//	                            prompt's user messages carry: "file <name>
//	                            (<media type>, <n> bytes)" as loaded through
//	                            Request.Files, or an expired placeholder
//	::system                    answer with the request's system prompt
//
// A title request (Request.Purpose llm.PurposeTitle, automatic title
// generation) is answered with the last user message's ::title text, or
// else "Title: " and its first line that is not a directive, or else
// "Scripted chat"; its other directives do not apply to it.
//
// Combinations: the response is the reasoning part (every ::think line,
// joined with newlines), then one text part (the ::reply, ::stream and echo
// pieces in the order of their first line, joined with newlines), then the
// tool calls in line order. ::fail wins over everything (the attempt fails
// before any event), then ::stall. When the conversation's last message is
// tool results (the tools' answers arrived), the response is the text "done"
// instead; ::fail, ::stall and ::usage still apply to it.
//
// The attempt number is Request.Attempt (the chat's generation_attempt, 0
// read as 1), so "::fail retryable 2" fails attempts 1 and 2 and answers on
// attempt 3. An unknown directive or bad arguments fail the call with a
// Fatal error naming the line. Without ::usage the usage is a deterministic
// estimate: whitespace-separated words in, words out. Tool call IDs are
// derived from the request, so a retried request gets the same IDs.
package scripted

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"time"
	"unicode"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/modelconfig"
)

func init() {
	llm.Register(modelconfig.ProviderScripted, func(p modelconfig.Provider, cfg modelconfig.ModelConfig) (llm.Model, error) {
		return New(WithInfo(llm.InfoFor(p, cfg))), nil
	})
}

// Sleeper waits for d or until ctx ends, returning ctx's error in that case.
// Tests inject one that records the durations and returns at once.
type Sleeper func(ctx context.Context, d time.Duration) error

// Sleep is the real Sleeper.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// timerSleep is Sleep with one timer for a whole stream: a stream of
// thousands of tokens makes one timer, not one per token.
func timerSleep() Sleeper {
	var t *time.Timer
	return func(ctx context.Context, d time.Duration) error {
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d) // since Go 1.23 a Reset timer delivers no stale tick
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
}

// Model is the scripted model. It is safe for concurrent use.
type Model struct {
	info  llm.Info
	sleep Sleeper
}

// Option configures a Model.
type Option func(*Model)

// WithSleeper makes the model wait with s between ::stream tokens.
func WithSleeper(s Sleeper) Option { return func(m *Model) { m.sleep = s } }

// WithInfo sets what Info reports.
func WithInfo(info llm.Info) Option { return func(m *Model) { m.info = info } }

// New returns a scripted model.
func New(opts ...Option) *Model {
	m := &Model{
		info: llm.Info{
			Provider: string(modelconfig.ProviderScripted), ProviderType: string(modelconfig.ProviderScripted),
			Model: modelconfig.ScriptedModel, ContextLimit: modelconfig.ScriptedContextLimit,
		},
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Info implements llm.Model.
func (m *Model) Info() llm.Info { return m.info }

// Stream implements llm.Model.
func (m *Model) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		if err := llm.ContextError(ctx); err != nil {
			yield(llm.Event{}, err)
			return
		}
		s, err := parse(lastUserText(req.Messages))
		if err != nil {
			yield(llm.Event{}, llm.NewFatal(err))
			return
		}
		if s.files && req.Purpose != llm.PurposeTitle {
			s.segments = append(s.segments, segment{kind: segReply, text: describeFiles(ctx, req)})
		}
		if s.system && req.Purpose != llm.PurposeTitle {
			s.segments = append(s.segments, segment{kind: segReply, text: req.System})
		}
		if req.Purpose == llm.PurposeTitle {
			s = script{segments: []segment{{kind: segReply, text: s.titleAnswer()}}, fail: s.titleFail}
		}
		attempt := max(req.Attempt, 1)
		if s.fail.failsOn(attempt) {
			yield(llm.Event{}, &llm.Error{Kind: s.fail.kind, Err: fmt.Errorf("scripted: ::fail %s on attempt %d", s.fail.kind, attempt)})
			return
		}
		if s.stall {
			<-ctx.Done()
			yield(llm.Event{}, llm.ContextError(ctx))
			return
		}
		sleep := m.sleep
		if sleep == nil {
			sleep = timerSleep()
		}
		e := emitter{ctx: ctx, yield: yield, sleep: sleep}
		if toolResultsArrived(req.Messages) {
			s = script{segments: []segment{{kind: segReply, text: "done"}}, usage: s.usage}
		}
		e.run(s, req)
	}
}

// emitter yields a script's events, tracking part indexes and the output
// for the usage estimate.
type emitter struct {
	ctx   context.Context
	yield func(llm.Event, error) bool
	sleep Sleeper
	part  int
	// outWords counts the words of the output, for the usage estimate: a
	// count, not the pieces, so a long answer's text is not kept twice.
	outWords int64
}

// emit yields ev unless ctx has ended; false means stop.
func (e *emitter) emit(ev llm.Event) bool {
	if err := llm.ContextError(e.ctx); err != nil {
		e.yield(llm.Event{}, err)
		return false
	}
	return e.yield(ev, nil)
}

func (e *emitter) delta(t llm.EventType, s string) bool {
	if s == "" {
		return true
	}
	e.outWords += words(s)
	return e.emit(llm.Event{Type: t, Part: e.part, Delta: s})
}

func (e *emitter) run(s script, req llm.Request) bool {
	if len(s.think) > 0 {
		if !e.delta(llm.EventReasoningDelta, strings.Join(s.think, "\n")) {
			return false
		}
		e.part++
	}
	if text, ok := e.text(s.segments); !ok {
		return false
	} else if text {
		e.part++
	}
	ids := callIDs(req, len(s.tools))
	for i, tc := range s.tools {
		e.outWords += words(string(tc.args))
		if !e.emit(llm.Event{Type: llm.EventToolCall, Part: e.part, ToolCall: llm.ToolCall{ID: ids[i], Name: tc.name, Input: tc.args}}) {
			return false
		}
		e.part++
	}
	usage := llm.Usage{PromptTokens: promptWords(req), OutputTokens: e.outWords}
	if s.usage != nil {
		usage = *s.usage
	}
	if !e.emit(llm.Event{Type: llm.EventUsage, Usage: usage}) {
		return false
	}
	reason := llm.FinishStop
	if len(s.tools) > 0 {
		reason = llm.FinishToolCalls
	}
	return e.emit(llm.Event{Type: llm.EventFinish, FinishReason: reason})
}

// text emits the text part; wrote reports whether it had any text. Empty
// pieces (an empty ::reply, "::stream 0") are skipped; the others are
// separated by newlines.
func (e *emitter) text(segs []segment) (wrote, ok bool) {
	for _, seg := range segs {
		if (seg.kind == segStream && seg.n == 0) || (seg.kind != segStream && seg.text == "") {
			continue
		}
		sep := ""
		if wrote {
			sep = "\n"
		}
		wrote = true
		if seg.kind != segStream {
			if !e.delta(llm.EventTextDelta, sep+seg.text) {
				return wrote, false
			}
			continue
		}
		var wait time.Duration
		if seg.rate > 0 {
			wait = time.Duration(float64(time.Second) / seg.rate)
		}
		for n := 1; n <= seg.n; n++ {
			if wait > 0 {
				if err := e.sleep(e.ctx, wait); err != nil {
					if cerr := llm.ContextError(e.ctx); cerr != nil {
						e.yield(llm.Event{}, cerr)
					} else {
						e.yield(llm.Event{}, llm.NewFatal(err))
					}
					return wrote, false
				}
			}
			tok := fmt.Sprintf(" tok%d", n)
			if n == 1 {
				tok = sep + tok[1:]
			}
			if !e.delta(llm.EventTextDelta, tok) {
				return wrote, false
			}
		}
	}
	return wrote, true
}

// lastUserText is the text of the last user message.
func lastUserText(msgs []llm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser && hasText(msgs[i].Parts) {
			// Each text part is its own line, so a directive is never glued
			// to the text of a part after it (an attachment's placeholder).
			var lines []string
			for _, p := range msgs[i].Parts {
				if p.Type == chatmsg.PartText {
					lines = append(lines, p.Text)
				}
			}
			return strings.Join(lines, "\n")
		}
	}
	return ""
}

func hasText(parts []chatmsg.Part) bool {
	for _, p := range parts {
		if p.Type == chatmsg.PartText {
			return true
		}
	}
	return false
}

// toolResultsArrived reports whether the conversation ends with tool
// results: a tool message, or a message made only of tool-result parts.
func toolResultsArrived(msgs []llm.Message) bool {
	if len(msgs) == 0 {
		return false
	}
	last := msgs[len(msgs)-1]
	if last.Role == llm.RoleTool {
		return true
	}
	if len(last.Parts) == 0 {
		return false
	}
	for _, p := range last.Parts {
		if p.Type != chatmsg.PartToolResult {
			return false
		}
	}
	return true
}

// callIDs derives n tool call IDs from the request, so that the same
// request gets the same IDs and different steps get different ones.
func callIDs(req llm.Request, n int) []string {
	if n == 0 {
		return nil
	}
	h := sha256.New()
	enc := json.NewEncoder(h)
	_ = enc.Encode(req.System)
	for _, m := range req.Messages {
		_ = enc.Encode(m.Role)
		_ = enc.Encode(m.Parts)
	}
	prefix := "call_" + hex.EncodeToString(h.Sum(nil))[:12]
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s_%d", prefix, i+1)
	}
	return ids
}

// words counts the whitespace-separated words of s (strings.Fields's
// count, without its slice).
func words(s string) int64 {
	var n int64
	in := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			in = false
		} else if !in {
			in = true
			n++
		}
	}
	return n
}

// promptWords estimates the prompt's size in words.
func promptWords(req llm.Request) int64 {
	n := words(req.System)
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			n += words(p.Text) + words(string(p.Args)) + words(string(p.Result)) + words(p.ToolName)
		}
	}
	return n
}

// describeFiles is the ::files answer: the prompt's attachments as the
// model receives them.
func describeFiles(ctx context.Context, req llm.Request) string {
	var lines []string
	for _, m := range req.Messages {
		if m.Role != llm.RoleUser {
			continue
		}
		for _, p := range m.Parts {
			switch {
			case p.Type == chatmsg.PartFile && req.Files == nil:
				lines = append(lines, fmt.Sprintf("file %s (%s, not loadable)", p.Name, p.MediaType))
			case p.Type == chatmsg.PartFile:
				data, err := req.Files.LoadFile(ctx, p.FileID)
				if err != nil {
					lines = append(lines, fmt.Sprintf("file %s (%s, unavailable: %v)", p.Name, p.MediaType, err))
				} else {
					lines = append(lines, fmt.Sprintf("file %s (%s, %d bytes)", p.Name, p.MediaType, len(data)))
				}
			case p.Type == chatmsg.PartText && strings.HasPrefix(p.Text, "[The attachment"):
				lines = append(lines, p.Text)
			}
		}
	}
	if len(lines) == 0 {
		return "no files"
	}
	return strings.Join(lines, "\n")
}
