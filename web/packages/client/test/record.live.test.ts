// Records a real stream of one scripted conversation that produces every
// event type into test/fixtures/stream.sse (the recorded fixture the unit
// tests replay) when CHATD_RECORD is set; in every run it checks the
// conversation's events against the REST view of the chat.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readSSE, type StreamEvent, textOf } from '../src';
import { liveClient, tokens, waitFor } from './live';

describe('a live stream, recorded', () => {
  it('carries every event type and agrees with the REST messages', async () => {
    const client = liveClient();
    const chat = await client.createChat({
      title: 'fixture',
      dynamic_tools: [{ name: 'lookup', description: 'Look something up', input_schema: { type: 'object' } as never }],
    });
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
    const count = (t: string) => events.filter((e) => e.type === t).length;
    const status = () => [...events].reverse().find((e) => e.type === 'status') as Extract<StreamEvent, { type: 'status' }> | undefined;
    const waiting = async (what: string, n: number) =>
      waitFor(what, () => count('message') >= n && status()?.status.status === 'waiting');

    // A streamed reply with reasoning (message_part, message, status).
    await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::think pondering\n::stream 12 40' }] });
    await waitFor('the reply streaming', () => count('message_part') > 3);
    // queue_update: a message queued behind the running reply.
    await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::reply queued one' }], busy_behavior: 'queue' });
    await waiting('both replies', 4);
    // retry + preview_reset: a retryable failure, then a reply.
    await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::fail retryable 1\n::stream 5 0' }] });
    await waiting('the recovered reply', 6);
    // action_required: a dynamic tool call, answered.
    await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::tool lookup {"q":"x"}' }] });
    await waitFor('the tool call', () => count('action_required') > 0 && status()?.status.status === 'requires_action');
    const call = (events.find((e) => e.type === 'action_required') as Extract<StreamEvent, { type: 'action_required' }>).action_required.tool_calls![0];
    await client.submitToolResults(chat.id!, [{ tool_call_id: call.tool_call_id, output: { answer: 42 } as never }]);
    await waitFor('the reply after the tool', () => events.some((e) => e.type === 'message' && textOf(e.message.content) === 'done'));
    await waitFor('waiting after the tool', () => status()?.status.status === 'waiting');
    // history_reset: an edit of the first message.
    const first = events.find((e) => e.type === 'message' && e.message.role === 'user') as Extract<StreamEvent, { type: 'message' }>;
    await client.editMessage(chat.id!, String(first.message.id), { content: [{ type: 'text', text: '::stream 6 0' }] });
    await waitFor('the edited history', () => count('history_reset') > 0 && events.some((e) => e.type === 'message' && textOf(e.message.content) === tokens(6)));
    await waitFor('waiting after the edit', () => status()?.status.status === 'waiting');
    // error: a fatal failure.
    await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::fail fatal' }] });
    await waitFor('the error', () => count('error') > 0 && status()?.status.status === 'error');
    ctrl.abort();
    await reading;

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
