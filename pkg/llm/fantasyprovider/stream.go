package fantasyprovider

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"log/slog"
	"regexp"
	"strings"

	"charm.land/fantasy"

	"github.com/chatd/chatd/pkg/llm"
	"github.com/chatd/chatd/pkg/telemetry"
)

// Stream implements llm.Model. The request goes out when the caller starts
// ranging; leaving the loop cancels it and releases the connection.
func (m *Model) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		if err := llm.ContextError(ctx); err != nil {
			yield(llm.Event{}, err)
			return
		}
		// fantasy does not close the response body when its consumer stops
		// early; cancelling the call's own context does. The context names
		// the model for the provider_attempt stages (telemetry.go).
		callCtx, cancel := context.WithCancel(telemetry.WithStageModel(ctx, m.stageModel(req.ReasoningEffort)))
		defer cancel()
		call, err := m.call(callCtx, req)
		if err != nil {
			yield(llm.Event{}, m.fail(ctx, err))
			return
		}
		parts, err := m.lm.Stream(callCtx, call)
		if err != nil {
			yield(llm.Event{}, m.fail(ctx, err))
			return
		}
		var t partTracker
		for part := range parts {
			ev, done, err := t.event(part)
			switch {
			case err != nil:
				yield(llm.Event{}, m.fail(ctx, err))
				return
			case done:
				if ev.Usage != (llm.Usage{}) {
					if !yield(llm.Event{Type: llm.EventUsage, Usage: ev.Usage}, nil) {
						return
					}
				}
				yield(llm.Event{Type: llm.EventFinish, FinishReason: ev.FinishReason}, nil)
				return
			case ev.Type != "":
				if !yield(ev, nil) {
					return
				}
			}
		}
		if err := llm.ContextError(ctx); err != nil {
			yield(llm.Event{}, err)
			return
		}
		yield(llm.Event{}, llm.NewRetryable(errors.New("the provider's stream ended without a finish")))
	}
}

// partTracker numbers the message parts as fantasy's stream parts open and
// close them.
type partTracker struct {
	next int // index of the next new part
	// the open text or reasoning part, if any
	open   llm.EventType
	openID string
	index  int
}

// event maps one fantasy stream part. It returns an event to yield (Type
// empty for none), done with the usage and finish reason in ev, or an
// error that ends the stream.
func (t *partTracker) event(p fantasy.StreamPart) (ev llm.Event, done bool, err error) {
	switch p.Type {
	case fantasy.StreamPartTypeTextDelta:
		return t.delta(llm.EventTextDelta, p), false, nil
	case fantasy.StreamPartTypeReasoningDelta:
		return t.delta(llm.EventReasoningDelta, p), false, nil
	case fantasy.StreamPartTypeTextEnd:
		t.close(llm.EventTextDelta, p.ID)
	case fantasy.StreamPartTypeReasoningEnd:
		t.close(llm.EventReasoningDelta, p.ID)
	case fantasy.StreamPartTypeToolInputStart, fantasy.StreamPartTypeToolInputDelta:
		// The arguments arrive whole with the tool call; meanwhile the
		// stream is not idle.
		if !p.ProviderExecuted {
			return llm.Event{Type: llm.EventProgress}, false, nil
		}
	case fantasy.StreamPartTypeToolCall:
		if p.ProviderExecuted {
			return llm.Event{}, false, nil
		}
		input := p.ToolCallInput
		if input == "" {
			input = "{}"
		}
		t.open = ""
		ev = llm.Event{Type: llm.EventToolCall, Part: t.next, ToolCall: llm.ToolCall{ID: p.ID, Name: p.ToolCallName, Input: json.RawMessage(input)}}
		t.next++
		return ev, false, nil
	case fantasy.StreamPartTypeFinish:
		return llm.Event{Usage: usageOf(p.Usage), FinishReason: finishReason(p.FinishReason)}, true, nil
	case fantasy.StreamPartTypeError:
		if p.Error == nil {
			return llm.Event{}, false, errors.New("the provider's stream failed")
		}
		return llm.Event{}, false, p.Error
	case fantasy.StreamPartTypeWarnings:
		for _, w := range p.Warnings {
			slog.Debug("llm: provider call warning", "type", w.Type, "setting", w.Setting, "message", w.Message, "details", w.Details)
		}
	}
	return llm.Event{}, false, nil
}

func (t *partTracker) delta(typ llm.EventType, p fantasy.StreamPart) llm.Event {
	if p.Delta == "" {
		return llm.Event{} // e.g. an Anthropic signature delta
	}
	if t.open != typ || t.openID != p.ID {
		if typ == llm.EventReasoningDelta && strings.Trim(p.Delta, "\n") == "" {
			// fantasy opens each Responses reasoning summary with "\n"; a
			// part does not start with a separator.
			return llm.Event{}
		}
		t.open, t.openID, t.index = typ, p.ID, t.next
		t.next++
	}
	return llm.Event{Type: typ, Part: t.index, Delta: p.Delta}
}

func (t *partTracker) close(typ llm.EventType, id string) {
	if t.open == typ && t.openID == id {
		t.open = ""
	}
}

// usageOf converts fantasy's usage, whose InputTokens leaves out the
// cached part of the prompt (fantasy subtracts it for OpenAI; Anthropic
// reports it apart).
func usageOf(u fantasy.Usage) llm.Usage {
	return llm.Usage{
		PromptTokens:     u.InputTokens + u.CacheReadTokens + u.CacheCreationTokens,
		OutputTokens:     u.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens,
		CacheWriteTokens: u.CacheCreationTokens,
		ReasoningTokens:  u.ReasoningTokens,
	}
}

func finishReason(r fantasy.FinishReason) llm.FinishReason {
	switch r {
	case fantasy.FinishReasonStop:
		return llm.FinishStop
	case fantasy.FinishReasonToolCalls:
		return llm.FinishToolCalls
	case fantasy.FinishReasonLength:
		return llm.FinishLength
	case fantasy.FinishReasonContentFilter:
		return llm.FinishContentFilter
	}
	return llm.FinishOther
}

// transientCodes are error codes, carried by in-stream failure events, of
// temporary conditions.
var transientCodes = map[string]bool{
	"server_error": true, "internal_error": true, "overloaded_error": true, "api_error": true,
	"rate_limit_error": true, "rate_limit_exceeded": true, "server_is_overloaded": true, "slow_down": true,
}

// responsesCode finds the code fantasy appends to a Responses API failure
// event's message.
var responsesCode = regexp.MustCompile(`\(code: ([A-Za-z0-9_.-]+)\)$`)

// fail is classify's *llm.Error for a failed call of m: named after m's
// provider, and with m's API key scrubbed from the text of an upstream
// failure (a provider's 401 body may echo it).
func (m *Model) fail(ctx context.Context, err error) *llm.Error {
	e := *classify(ctx, err)
	e.Provider = m.info.Provider
	if e.Upstream {
		e.Err = llm.Scrub(e.Err, m.apiKey)
	}
	return &e
}

// classify turns whatever fantasy or the SDKs returned into an *llm.Error.
func classify(ctx context.Context, err error) *llm.Error {
	if e := llm.ContextError(ctx); e != nil {
		return e
	}
	var le *llm.Error
	if errors.As(err, &le) {
		return le
	}
	e := classifyUpstream(err)
	e.Upstream = true
	return e
}

// classifyUpstream classifies an error fantasy or an SDK returned.
func classifyUpstream(err error) *llm.Error {
	var pe *fantasy.ProviderError
	if errors.As(err, &pe) {
		if pe.StatusCode >= 400 {
			return &llm.Error{Kind: llm.StatusKind(pe.StatusCode), StatusCode: pe.StatusCode, Err: err}
		}
		// An error event inside a 200 stream: its type says whether it is
		// transient (fantasy sets TransientError).
		if pe.IsRetryable() || llm.IsTransient(err) {
			return llm.NewRetryable(err)
		}
		return llm.NewFatal(err)
	}
	if llm.IsTransient(err) || fantasy.IsTransportError(err) {
		return llm.NewRetryable(err)
	}
	var fe *fantasy.Error
	if errors.As(err, &fe) {
		if m := responsesCode.FindStringSubmatch(fe.Message); m != nil && transientCodes[m[1]] {
			return llm.NewRetryable(err)
		}
	}
	return llm.NewFatal(err)
}
