import { describe, expect, it } from 'vitest';
import { applyEvent, cmpInt, emptyChatState, mergePart, runningFor, type StreamEvent } from '../src';

const chat = 'c1';
const part = (hv: string, ga: string, seq: string, text: string, index = 0): StreamEvent => ({
  type: 'message_part', chat_id: chat,
  message_part: { role: 'assistant', part: { type: 'text', text, index }, history_version: hv, generation_attempt: ga, seq },
});
const msg = (id: string, text: string): StreamEvent => ({
  type: 'message', chat_id: chat, message: { id, chat_id: chat, role: 'assistant', content: [{ type: 'text', text }] },
});
const run = (...evs: StreamEvent[]) => evs.reduce(applyEvent, emptyChatState(chat));

describe('applyEvent', () => {
  it('merges text deltas and ignores parts it already applied', () => {
    const s = run(part('1', '1', '1', 'Hel'), part('1', '1', '2', 'lo'), part('1', '1', '2', 'lo'), part('1', '1', '1', 'Hel'));
    expect(s.live?.parts).toEqual([{ type: 'text', text: 'Hello' }]);
    expect(s.live?.seq).toBe('2');
  });

  it('replaces the live message with the committed one, and drops stragglers of that episode', () => {
    const s = run(part('1', '1', '1', 'Hi'), msg('7', 'Hi'), part('1', '1', '2', ' again'));
    expect(s.live).toBeNull();
    expect(s.messages.map((m) => m.id)).toEqual(['7']);
  });

  it('starts a new live message for the next attempt after preview_reset', () => {
    const s = run(part('1', '1', '1', 'first try'), { type: 'preview_reset', chat_id: chat, preview_reset: {} }, part('1', '1', '2', 'late'), part('1', '2', '1', 'second'));
    expect(s.live?.parts).toEqual([{ type: 'text', text: 'second' }]);
    expect(s.retired).toEqual(['1', '1']);
  });

  it('orders messages by their 64-bit id, past 2^53, and upserts a re-sent one', () => {
    const big = '9007199254740993'; // 2^53 + 1: a JS number would round it
    const s = run(msg(big, 'b'), msg('9007199254740992', 'a'), msg(big, 'b2'));
    expect(s.messages.map((m) => [m.id, m.content?.[0].text])).toEqual([['9007199254740992', 'a'], [big, 'b2']]);
    expect(cmpInt(big, '9007199254740992')).toBe(1);
  });

  it('clears history on history_reset and follows status, queue, retry, error and tool calls', () => {
    let s = run(msg('1', 'x'), { type: 'history_reset', chat_id: chat, history_reset: {} });
    expect(s.messages).toEqual([]);
    s = run(
      { type: 'status', chat_id: chat, status: { status: 'running' } },
      { type: 'retry', chat_id: chat, retry: { attempt: 1, error: 'overloaded', retrying_at: '2030-01-01T00:00:00Z' } },
      { type: 'queue_update', chat_id: chat, queue_update: { queued_messages: [{ id: '3', content: [{ type: 'text', text: 'q' }] }] } },
    );
    expect([s.status, s.retry?.attempt, s.queue.length]).toEqual(['running', 1, 1]);
    s = applyEvent(s, { type: 'status', chat_id: chat, status: { status: 'requires_action' } });
    expect(s.retry).toBeNull();
    s = applyEvent(s, { type: 'action_required', chat_id: chat, action_required: { tool_calls: [{ tool_call_id: 't', tool_name: 'lookup', args: {} }] } });
    expect(s.toolCalls.length).toBe(1);
    s = applyEvent(applyEvent(s, { type: 'status', chat_id: chat, status: { status: 'error' } }), { type: 'error', chat_id: chat, error: { message: 'boom', kind: 'fatal' } });
    expect([s.toolCalls.length, s.error?.message]).toEqual([0, 'boom']);
    expect(applyEvent(s, { type: 'status', chat_id: chat, status: { status: 'waiting' } }).error).toBeNull();
  });

  it('ignores another chat\'s events', () => {
    const s = emptyChatState(chat);
    expect(applyEvent(s, { ...msg('1', 'x'), chat_id: 'other' })).toBe(s);
  });

  it('keeps non-text parts at their index', () => {
    const parts = mergePart(mergePart([], { type: 'reasoning', text: 'hm', index: 0 }), { type: 'tool-call', tool_name: 'x', index: 1 });
    expect(parts.map((p) => p.type)).toEqual(['reasoning', 'tool-call']);
  });

  it('follows a running tool call: its progress keeps its start, its finish its last progress', () => {
    const started = '2026-03-10T12:00:00Z';
    const call = { tool_call_id: 'c1', tool_name: 'ops__sync' };
    let parts = mergePart([], { index: 0, type: 'tool-status', ...call, state: 'running', started_at: started });
    parts = mergePart(parts, { index: 0, type: 'tool-progress', ...call, progress: 1, total: 2, message: 'half' });
    expect(parts[0]).toMatchObject({ type: 'tool-status', state: 'running', started_at: started, progress: 1, total: 2, message: 'half' });
    parts = mergePart(parts, { index: 0, type: 'tool-status', ...call, state: 'finished', started_at: started, duration_ms: 1500 });
    expect(parts[0]).toMatchObject({ type: 'tool-status', state: 'finished', duration_ms: 1500, progress: 1 });
    // Another call of the step at its own index.
    parts = mergePart(parts, { index: 1, type: 'tool-status', tool_call_id: 'c2', tool_name: 'ops__read', state: 'running', started_at: started });
    expect(parts.map((p) => [p.tool_call_id, p.state])).toEqual([['c1', 'finished'], ['c2', 'running']]);
  });

  it('shows a tool episode as the live message and retires it when the results are stored', () => {
    let s = emptyChatState(chat);
    s = applyEvent(s, {
      type: 'message_part', chat_id: chat,
      message_part: { role: 'tool', history_version: '4', generation_attempt: '1', seq: '1',
        part: { index: 0, type: 'tool-status', tool_call_id: 'c1', tool_name: 'ops__sync', state: 'running', started_at: '2026-03-10T12:00:00Z' } },
    });
    expect([s.live?.role, s.live?.parts[0].state]).toEqual(['tool', 'running']);
    s = applyEvent(s, msg('5', 'results'));
    expect(s.live).toBeNull();
  });

  it('counts a running call\'s time from its start, never below zero', () => {
    const at = '2026-03-10T12:00:00Z';
    expect(runningFor(at, Date.parse(at) + 7250)).toBe(7250);
    expect(runningFor(at, Date.parse(at) - 900)).toBe(0);
    expect(runningFor(undefined, 5)).toBe(0);
  });
});
