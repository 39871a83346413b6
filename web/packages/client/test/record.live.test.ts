// Records a real stream of one scripted conversation that produces every
// event type into test/fixtures/stream.sse (the recorded fixture the unit
// tests replay) when CHATD_RECORD is set; in every run it checks the
// conversation's events against the REST view of the chat.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readSSE, type StreamEvent, textOf } from '../src';
import { converse, liveClient, toolChat, tokens } from './live';

describe('a live stream, recorded', () => {
  it('carries every event type and agrees with the REST messages', async () => {
    const client = liveClient();
    const chat = await toolChat(client, 'fixture');
    const ctrl = new AbortController();
    const resp = await fetch(`${client.baseUrl}/api/v2/chats/${chat.id}/stream`, {
      headers: { Authorization: `Bearer ${client.token}`, Accept: 'text/event-stream' }, signal: ctrl.signal,
    });
    expect(resp.status).toBe(200);
    const raw: string[] = [];
    const events: StreamEvent[] = [];
    const reading = readSSE(resp.body!, ({ id, data }) => {
      raw.push(`id: ${id}\ndata: ${data}\n\n`);
      events.push(JSON.parse(data));
    }).catch(() => {});
    await converse(client, chat, () => events);
    ctrl.abort();
    await reading;

    const count = (t: string) => events.filter((e) => e.type === t).length;
    for (const t of ['message_part', 'preview_reset', 'message', 'status', 'error', 'queue_update', 'action_required', 'retry', 'history_reset']) {
      expect(count(t), `events of type ${t}`).toBeGreaterThan(0);
    }
    const rest = await client.listMessages(chat.id!);
    for (const m of rest.messages!) expect(typeof m.id, 'REST message ids are strings').toBe('string');
    expect(rest.messages!.map((m) => textOf(m.content)).filter(Boolean)).toContain(tokens(6));
    if (process.env.CHATD_RECORD) {
      // The chat id, user id and times are kept: the fixture is a real stream.
      writeFileSync(fileURLToPath(new URL('./fixtures/stream.sse', import.meta.url)), raw.join(''));
    }
  });
});
