// ChatState is what a client shows of one chat, built only from stream
// events: applyEvent is pure (it returns a new state, never mutates), so
// React can compare states by reference and tests can replay fixtures.
import type { ChatStatus, ErrorPayload, LivePart, Message, MessagePart, QueuedMessage, RetryPayload, StreamEvent, ToolCall } from './types';

/** The reply being generated: one episode's parts, merged from deltas. */
export interface LiveMessage {
  role: string;
  historyVersion: string;
  generationAttempt: string;
  /** The last part seq applied. */
  seq: string;
  parts: LivePart[];
}

export interface ChatState {
  chatId: string;
  /** Committed messages, oldest first. */
  messages: Message[];
  live: LiveMessage | null;
  /** Episodes at or below this [history_version, generation_attempt] are over. */
  retired: [string, string];
  status: ChatStatus | '';
  queue: QueuedMessage[];
  /** Pending dynamic tool calls while status is requires_action. */
  toolCalls: ToolCall[];
  retry: RetryPayload | null;
  error: ErrorPayload | null;
}

export function emptyChatState(chatId: string): ChatState {
  return { chatId, messages: [], live: null, retired: ['0', '0'], status: '', queue: [], toolCalls: [], retry: null, error: null };
}

/** Compares decimal integer strings (64-bit values are JSON strings). */
export function cmpInt(a: string | number | undefined, b: string | number | undefined): number {
  const x = BigInt(a ?? 0), y = BigInt(b ?? 0);
  return x < y ? -1 : x > y ? 1 : 0;
}

const later = (a: [string, string], b: [string, string]) => {
  const c = cmpInt(a[0], b[0]);
  return c > 0 || (c === 0 && cmpInt(a[1], b[1]) > 0);
};

function retire(s: ChatState): ChatState {
  const l = s.live;
  if (!l) return s;
  const key: [string, string] = [l.historyVersion, l.generationAttempt];
  return { ...s, live: null, retired: later(key, s.retired) ? key : s.retired };
}

const isToolLive = (p: LivePart) => p.type === 'tool-status' || p.type === 'tool-progress';

/**
 * mergePart applies one live part delta: text and reasoning at the same
 * index append; a tool call's status and progress at its index merge into
 * one "tool-status" part (a progress keeps the running call's started_at, a
 * finish keeps its last progress).
 */
export function mergePart(parts: LivePart[], delta: LivePart & { index?: number }): LivePart[] {
  const { index = 0, ...part } = delta;
  const out = parts.slice();
  const cur = out[index];
  if (cur && cur.type === part.type && (part.type === 'text' || part.type === 'reasoning')) {
    out[index] = { ...cur, text: (cur.text ?? '') + (part.text ?? '') };
  } else if (cur && isToolLive(cur) && isToolLive(part) && cur.tool_call_id === part.tool_call_id) {
    out[index] = { ...cur, ...part, type: 'tool-status', state: part.type === 'tool-status' ? part.state : cur.state };
  } else {
    out[index] = part;
  }
  return out;
}

/** The milliseconds a running call has run at now (never negative: the worker's clock may be ahead). */
export function runningFor(startedAt: string | undefined, now: number): number {
  const at = startedAt ? Date.parse(startedAt) : NaN;
  return Number.isNaN(at) ? 0 : Math.max(0, now - at);
}

/** applyEvent returns the state after ev (the same object when ev changes nothing). */
export function applyEvent(s: ChatState, ev: StreamEvent): ChatState {
  if (ev.chat_id && ev.chat_id !== s.chatId) return s;
  switch (ev.type) {
    case 'message_part': {
      const mp = ev.message_part;
      const key: [string, string] = [String(mp.history_version), String(mp.generation_attempt)];
      if (!later(key, s.retired)) return s; // a straggler of a finished episode
      let cur = s;
      let live = s.live;
      if (!live || live.historyVersion !== key[0] || live.generationAttempt !== key[1]) {
        cur = retire(s);
        live = { role: mp.role, historyVersion: key[0], generationAttempt: key[1], seq: '0', parts: [] };
      }
      if (cmpInt(mp.seq, live.seq) <= 0) return s; // already shown
      live = { ...live, seq: String(mp.seq), parts: mergePart(live.parts, mp.part ?? {}) };
      return { ...cur, live, retry: null };
    }
    case 'preview_reset':
      return retire(s);
    case 'message': {
      // A committed message replaces the live one: never show both.
      const m = { ...ev.message, id: String(ev.message.id) };
      const base = retire(s);
      const msgs = base.messages.filter((x) => x.id !== m.id);
      msgs.push(m);
      msgs.sort((a, b) => cmpInt(a.id, b.id));
      return { ...base, messages: msgs, retry: null };
    }
    case 'history_reset':
      return { ...retire(s), messages: [] };
    case 'status': {
      const status = ev.status.status;
      return {
        ...s,
        status,
        toolCalls: status === 'requires_action' ? s.toolCalls : [],
        retry: status === 'running' ? s.retry : null,
        error: status === 'error' ? s.error : null,
      };
    }
    case 'error':
      return { ...s, error: ev.error };
    case 'queue_update':
      return { ...s, queue: ev.queue_update.queued_messages ?? [] };
    case 'action_required':
      return { ...s, toolCalls: ev.action_required.tool_calls ?? [] };
    case 'retry':
      return { ...s, retry: ev.retry };
    default:
      return s;
  }
}

/** The chat is generating or waiting on tools: a new message queues or interrupts. */
export function isBusy(status: ChatState['status']): boolean {
  return status === 'running' || status === 'interrupting' || status === 'requires_action';
}

/** The plain text of a message's text parts. */
export function textOf(content: MessagePart[] | undefined): string {
  return (content ?? []).filter((p) => p.type === 'text').map((p) => p.text ?? '').join('');
}
