// The stream client against a live chatd, its connection cut right after
// the first event of every type (and after every fifth message part): what
// it shows in the end is exactly the chat's REST history, each message
// once, and no live part was applied twice.
import { describe, expect, it } from 'vitest';
import { ChatStream, applyEvent, emptyChatState, textOf, type StreamEvent } from '../src';
import { converse, liveClient, toolChat, waitFor } from './live';

describe('a live stream, cut at every event type', () => {
  it('resumes from its cursor without doubling or dropping anything', async () => {
    const client = liveClient();
    const chat = await toolChat(client, 'resume');
    const events: StreamEvent[] = [];
    const cutAt = new Set<string>();
    let state = emptyChatState(chat.id!);
    let parts = 0;
    const partKeys = new Set<string>();
    const stream: ChatStream = new ChatStream(client, chat.id!, {
      minDelayMs: 5, maxDelayMs: 50,
      onReset: () => { state = emptyChatState(chat.id!); },
      onEvent: (ev) => {
        events.push(ev);
        state = applyEvent(state, ev);
        if (ev.type === 'message_part') {
          const mp = ev.message_part;
          const key = `${mp.history_version}/${mp.generation_attempt}/${mp.seq}`;
          expect(partKeys.has(key), `part ${key} delivered twice`).toBe(false);
          partKeys.add(key);
        }
        if (!cutAt.has(ev.type) || (ev.type === 'message_part' && ++parts % 5 === 0)) {
          cutAt.add(ev.type);
          stream.drop();
        }
      },
    });
    stream.start();
    try {
      await converse(client, chat, () => events);
      const rest = await client.listMessages(chat.id!);
      const want = (rest.messages ?? []).map((m) => [String(m.id), m.role, textOf(m.content)]);
      await waitFor('the stream to show the REST history', () =>
        JSON.stringify(state.messages.map((m) => [String(m.id), m.role, textOf(m.content)])) === JSON.stringify(want));
      expect(state.live).toBeNull();
      expect(state.status).toBe('error');
      for (const t of ['message_part', 'preview_reset', 'message', 'status', 'error', 'queue_update', 'action_required', 'retry', 'history_reset']) {
        expect(cutAt.has(t), `a cut after a ${t} event`).toBe(true);
      }
      expect(stream.connects).toBeGreaterThan(9);
    } finally {
      stream.stop();
    }
  });
});
